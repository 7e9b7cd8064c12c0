"""Every step the shell calls, and what only the loop's steps use."""
