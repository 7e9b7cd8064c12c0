"""How a running agent is doing, judged from more than its heartbeat: what its tools do."""
