"""Exit codes shared by the `genesis` CLI and start-multi-agent-loop.sh (docs/reference/exit-codes.md
says what each means to the user)."""

OK = 0
ERROR = 1              # an internal error; the message says what failed
USAGE = 2              # bad flag, bad configuration, not a git work tree
BREAKER_OPEN = 3       # the circuit breaker is OPEN: the loop stopped or refuses to start
LOCKED = 4             # another loop is running on this project
NOT_RUNNING = 5        # `genesis stop`: no loop is running on this project
DISK_FULL = 6          # no room left to write Genesis's state or logs: stopped cleanly
WATCHER_LOST = 7       # the watcher of a phase died of a signal too often in one run
STEP_TIMEOUT = 8       # a step of Genesis's own (git, a lock) overran its bound twice
AGENT_FAILED = 10      # run-phase: the agent exited by itself with a non-zero status, or could not start
PHASE_SKIPPED = 11     # run-phase: the phase's trigger said not this iteration
WAIT = 12              # run-phase, iteration finish: a wait is planned (`genesis wait`), then go on
WORK_DONE = 13         # iteration finish: the work is done (GENESIS_DONE_WHEN); the loop ends with 0
USAGE_LIMIT = 20       # a usage limit resets later than GENESIS_MAX_LIMIT_WAIT: stopped, restart after it
API_OUTAGE = 21        # the model API failed for longer than GENESIS_MAX_OUTAGE_MINUTES
AGENT_FATAL = 22       # the agent reported an error retrying cannot fix (login, billing, model, request, a refused tool permission)
MAX_RUNTIME = 23       # GENESIS_MAX_RUNTIME_HOURS reached (checked between phases)
MAX_COST = 24          # GENESIS_MAX_COST_USD reached (checked between phases)
RECOVERY_SPENT = 25    # GENESIS_MAX_RECOVERIES retries of stuck phases in one run: the loop only thrashes
STATE_LOST = 26        # Genesis's own state (its lock, the run's settings) was taken from under the loop
HISTORY_REWRITTEN = 27 # a phase rewrote or deleted history, switched branch or detached HEAD (see GENESIS_ALLOW_HISTORY_REWRITE)
UNTRUSTED_COMMAND = 28 # a command genesis.conf names is new or changed since the last start: approve it
SANDBOX_UNAVAILABLE = 29  # the box GENESIS_SANDBOX names cannot run here: install it, or choose auto or off
ALERT_FAILED = 30       # `genesis alert test`: an alert channel failed (the others' outcome is printed)
FLEET_TASKS_FAILED = 31 # a fleet (--parallel): some task failed permanently (its branch kept; wins over 32)
FLEET_NEEDS_REVIEW = 32 # a fleet (--parallel): some task's branch needs review (a conflict the Merger left)
SERVE_FAILED = 33      # `genesis serve`: the address cannot be listened on (the port is taken, no permission)
MONITOR_LOST = 34      # a fleet's child: its monitor was gone past GENESIS_FLEET_MONITOR_STOP_SECONDS (its task may be another machine's)
STEPPED_ASIDE = 35  # a fleet's keyed child: its push was refused, another loop of its task owns the branch
LIMIT_FAR = 36         # a usage limit resets weeks away (a monthly or credit-pool limit): stopped, the date said
AGENT_STALE = 124      # run-phase: no heartbeat for the stale window; tree killed
AGENT_OVERTIME = 125   # run-phase: over the runtime cap; tree killed
INTERRUPTED_HUP = 129  # SIGHUP (the terminal or SSH session closed)
INTERRUPTED_INT = 130  # SIGINT
INTERRUPTED_TERM = 143 # SIGTERM
