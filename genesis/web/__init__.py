"""`genesis serve`: a local, read-only web dashboard over every loop and fleet on this machine.

Nothing outside this folder imports it (the loop never pays for the web extra): `genesis
serve` imports it inside its command. The HTTP side needs the `web` extra (Starlette and
uvicorn); the snapshot, discovery and security modules need only Genesis itself.
"""
