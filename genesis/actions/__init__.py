"""Acting on a loop or a fleet from afar: one implementation behind the terminal, the dashboard
and the alert links (perform.py), the requests a live process picks up (inbox.py), the keys
that let a surface act (control.py) and the signed, single-use links an alert carries (links.py)."""
