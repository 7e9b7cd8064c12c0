"""`genesis doctor`: checks the machine before a first night (git, the project, the agent CLI
and its login, the box, the hook, the alerts) and says what works, what does not, and the
one command that fixes each."""
