"""Plain helpers for the tests, one concept a module (fixtures and hooks are in the conftest.py files):

  paths     where things are in the checkout
  hermetic  what a test must not inherit from the developer's environment
  git       git in a test's project
  state     Genesis's state folder of a project and its ledger's events
  procs     processes and ports: alive, listening, a free port
  waits     wait_for: a signal instead of a fixed sleep
  agent     a script run as a phase's agent (supervised, under a watcher process, or by the loop)
  loop      the shipped loop with its time knobs compressed
  nights    hand-built nights for the report tests
  receiver  a local HTTP receiver for the alert tests
  chromium  a headless Chromium that renders a page
  spawn     process shapes, run as a script: listeners, sleepers, daemons, trees, a watcher
"""
