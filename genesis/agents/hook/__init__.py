"""The heartbeat hook in every CLI: where it goes and how (spec), the careful edit of a
CLI's own settings file (settingsfile, over replace, jsonedit and record), and running it as
the CLI would (selftest)."""
