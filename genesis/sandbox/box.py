"""The agent's box: which one runs, what it protects, and the launch wrapped in it.

GENESIS_SANDBOX chooses: auto (bubblewrap where a trial box runs, else Landlock, else
Seatbelt on macOS, else none), one of them by name (refused at start where it cannot run),
or off. What each protects is said once at start (`line`) and recorded in the ledger.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Mapping

from genesis.sandbox import landlock, network as net, unixsockets
from genesis.sandbox.allowlist import Allowlist
from genesis.sandbox.boxenv import boxed_env, git_identity
from genesis.sandbox.bwrap import bwrap_argv
from genesis.sandbox.detect import INSTALL_BWRAP, Machine
from genesis.sandbox.home import allowed_env
from genesis.sandbox.places import TMP, Places
from genesis.sandbox.seatbelt import seatbelt_argv
from genesis.sandbox.sockets import NAME_SERVICES, named_sockets

__all__ = ["Box", "Unavailable", "choose", "CHOICES", "BUBBLEWRAP", "LANDLOCK", "SEATBELT", "NONE", "OFF"]

BUBBLEWRAP, LANDLOCK, SEATBELT, NONE, OFF = "bubblewrap", "landlock", "seatbelt", "none", "off"
CHOICES = ("auto", "bwrap", LANDLOCK, SEATBELT, OFF)
OPEN_NET, NO_NET, ALLOW_NET = "open", "none", net.ALLOWLIST
NETWORKS = (ALLOW_NET, OPEN_NET, NO_NET)   # GENESIS_NETWORK
UNBOXED = "Genesis fails closed instead (see docs/concepts/box.md)"
# What of the user's each box keeps from the agent, and what it leaves open (docs/concepts/box.md).
_NET = "the network is the host's (loopback services included)"
_TMUX = "a tmux or screen server's, which runs any command it is sent outside the box"
_HOME_READ = "it CAN read all of HOME (~/.ssh, ~/.aws, ~/.config/gh)"
REACH = {
    BUBBLEWRAP: ("HOME is private (its CLI's folder, the language caches and GENESIS_BOX_ALLOW kept), no socket "
                 f"under /run or /run/user, no secret variable; {_NET}"),
    SEATBELT: ("HOME is unreadable (but its CLI's folder, the language caches and GENESIS_BOX_ALLOW), no secret "
               f"variable; it CAN reach sockets outside HOME (/tmp, /var/run) and {_NET}"),
    LANDLOCK: (f"no secret variable; {_HOME_READ}, reach every socket (ssh-agent, /run/user, docker, {_TMUX}: "
               f"{{why}}) and {_NET}"),
    NONE: ("no secret variable; it CAN read and write all of HOME (~/.ssh, ~/.aws, ~/.config/gh), reach every "
           f"socket (ssh-agent, /run/user, docker, {_TMUX}) and {_NET}"),
    OFF: ("it CAN read and write all of HOME (~/.ssh, ~/.aws, ~/.config/gh), reach every socket (ssh-agent, "
          f"/run/user, docker), every secret variable and {_NET}"),
}
# Landlock's sockets: from ABI 9 it keeps the outside's socket files away; below, a seccomp filter
# keeps every unix stream socket away (unixsockets.py), the box's own too.
LANDLOCK_SCOPED = (f"no secret variable, no socket file outside the box but the name services' and "
                   f"GENESIS_BOX_ALLOW's (Landlock ABI {landlock.RESOLVE_UNIX_ABI}); {_HOME_READ} and {_NET}")
LANDLOCK_FILTERED = ("no secret variable; no unix stream socket can be opened in the box (a seccomp filter), so no "
                     "server's socket outside it is reached (ssh-agent, /run/user, docker, a tmux or screen "
                     "server's): a program that needs one (a local database's socket, Python 3.14's "
                     "multiprocessing forkserver) fails; bubblewrap or a kernel with Landlock ABI "
                     f"{landlock.RESOLVE_UNIX_ABI} keeps only the outside's sockets away; {_HOME_READ} and {_NET}")
ALLOW_NET_SAID = ("a network of its own: its own loopback, and out only through Genesis's proxy to the allowed "
                  "hosts (the host's loopback services and every other host refused, each refusal recorded)")
SEATBELT_ALLOW_SAID = ("out only through Genesis's proxy to the allowed hosts (every other host refused and recorded "
                       "by the proxy; a direct connection refused by Seatbelt, unrecorded); the host's loopback "
                       "shared: the box can listen there but reach only the proxy's port and the allowed ports, "
                       "and any local process can reach the proxy's port")
NO_NET_SAID = {BUBBLEWRAP: "no network (GENESIS_NETWORK=none): a loopback of its own, no abstract socket outside",
               SEATBELT: "no network but the loopback (GENESIS_NETWORK=none; the host's: its services stay "
                         "reachable)"}


class Unavailable(RuntimeError):
    """The box GENESIS_SANDBOX names cannot run here; the message says how to get it."""


@dataclass(frozen=True)
class Box:
    kind: str                      # bubblewrap | landlock | seatbelt | none | off
    places: Places | None = None
    program: str = ""              # bwrap or sandbox-exec
    rules: landlock.Ruleset | None = None
    why_none: str = ""             # kind none: why no box could run
    root: bool = False             # bubblewrap as root: its own user namespace, no capability (bwrap.py)
    weak: str = ""                 # bubblewrap as root that cannot drop root's capabilities: why
    network: str = OPEN_NET        # GENESIS_NETWORK: open (the host's), none (its own loopback alone), allowlist
    allowed: Allowlist | None = None  # allowlist: where its proxy lets the agent go (nethosts.py)
    proxy_dir: str = ""            # allowlist: the running proxy's folder (network.serving); "": no way out
    proxy_port: int = 0            # allowlist in Seatbelt: the running proxy's port on 127.0.0.1; 0: no way out
    network_wanted: str = ""       # allowlist asked for in a box that cannot: the network stays the host's
    unix_filter: unixsockets.Filter | None = None  # Landlock below ABI 9: no unix stream socket in the box
    sockets_open: str = ""         # Landlock: why the outside's socket files stay reachable ("": they do not)

    @property
    def pid_namespace(self) -> bool:
        """The agent's pids (the hook's `pid`) are its namespace's, not the watcher's."""
        return self.kind == BUBBLEWRAP

    @property
    def signals_scoped(self) -> bool:
        """Nothing in the box can signal a process outside it: any signal the watcher gets
        comes from outside the agent's tree."""
        if self.kind == LANDLOCK:
            return bool(self.rules and self.rules.scoped)
        return self.kind in (BUBBLEWRAP, SEATBELT)

    def wrap(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        if (self.kind == BUBBLEWRAP and self.network == ALLOW_NET and self.allowed is not None
                and net.folder_ok(self.proxy_dir)):  # else (no proxy running, a folder not ours): no way out
            return bwrap_argv(self.program, self.places, net.bridge_argv(self.allowed, argv), root=self.root,
                              network=False, net_dir=(self.proxy_dir, net.BOX_DIR))
        if self.kind == BUBBLEWRAP:
            return bwrap_argv(self.program, self.places, argv, root=self.root, network=self.network == OPEN_NET)
        if self.kind == SEATBELT and self.network == ALLOW_NET:  # no proxy running: no IP way out at all
            ports = (self.proxy_port, *self.allowed.loopback_ports()) if self.proxy_port and self.allowed else ()
            return seatbelt_argv(self.program, self.places, argv, network=False, out_ports=ports)
        if self.kind == SEATBELT:
            return seatbelt_argv(self.program, self.places, argv, network=self.network == OPEN_NET)
        return argv

    def in_child(self) -> None:
        """Between fork and exec: Landlock restricts the agent's process for good, and below ABI 9
        the socket filter follows (unixsockets.py)."""
        if self.kind == LANDLOCK and self.rules is not None:
            landlock.restrict(self.rules)
            if self.unix_filter is not None:  # no_new_privs is set: the filter needs it
                unixsockets.install(self.unix_filter)

    def line(self) -> str:
        """The start-up line: the box, and what it protects (or what is lost without one), then
        what of the user's it hides and what it leaves open (`reach`)."""
        return f"{self._protects()}{self._code()}; {self.reach()}"

    def code_open(self) -> tuple[str, ...]:
        """Genesis's code (places.code_paths) the agent can write in this box: what it plants
        there runs in Genesis's next process, outside the box, with the user's powers."""
        if self.places is None or self.kind in (NONE, OFF) or self.weak:
            return ()  # said whole by the line: the agent can edit Genesis's code
        if self.kind == LANDLOCK:
            roots = _landlock_writable(self.places, self.places.tmpdir)
            under = tuple(c for c in self.places.code if any(c == r or c.startswith(r.rstrip("/") + "/")
                                                            for r in roots))
            return under + self.places.code_open
        return self.places.code_open

    def _code(self) -> str:
        open_ = self.code_open()
        if not open_:
            return "; Genesis's code is out of its write reach" if self.kind == LANDLOCK and self.places else ""
        listed = ", ".join(open_[:4]) + (f" and {len(open_) - 4} more" if len(open_) > 4 else "")
        return (f"; it CAN write Genesis's code at {listed}, and what it plants there (a sitecustomize.py, a .pth) "
                f"runs in Genesis's next process with your powers: install Genesis and its Python outside HOME and "
                f"the temp folders" + ("" if self.kind != LANDLOCK else f", or install bubblewrap ({INSTALL_BWRAP})"))

    def _protects(self) -> str:
        if self.kind == BUBBLEWRAP and self.weak:
            return (f"sandbox: bubblewrap, a weaker box: Genesis runs as root and the box cannot take root's "
                    f"capabilities away ({self.weak}), so the agent CAN unmount its read-only folders and write "
                    f"Genesis's state and code; it cannot see or signal the loop, has a private /tmp. Run Genesis "
                    f"as a normal user, or allow user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                    f"user.max_user_namespaces)")
        if self.kind == BUBBLEWRAP:
            return ("sandbox: bubblewrap: the agent cannot write Genesis's state or code, cannot see or signal "
                    "the loop, has a private /tmp" + ("; as root, without capabilities" if self.root else ""))
        if self.kind == LANDLOCK:
            signals = ("cannot signal the loop or reach its abstract sockets" if self.rules and self.rules.scoped
                       else f"CAN signal the loop (Landlock ABI {self.rules.abi if self.rules else 0} < "
                            f"{landlock.SIGNAL_SCOPING_ABI})")
            return (f"sandbox: landlock: the agent writes only beneath the project, HOME and the temp folders, "
                    f"{signals}; it CAN edit Genesis's state inside the project's .git (install bubblewrap: "
                    f"{INSTALL_BWRAP}); {UNBOXED}")
        if self.kind == SEATBELT:
            return ("sandbox: seatbelt: the agent cannot write Genesis's state or code, cannot signal the loop; "
                    "it can see the loop and reach local servers under /tmp")
        lost = "the agent can edit Genesis's state and code, signal the loop and reach local servers under /tmp"
        if self.kind == OFF:
            return f"sandbox: off (GENESIS_SANDBOX=off): {lost}; {UNBOXED}"
        return f"sandbox: none ({self.why_none}); {lost}; {UNBOXED}"

    def reach(self) -> str:
        """What of the user's the agent can reach from this box, in the words the start line,
        the report and `genesis doctor` share."""
        said = self._landlock_reach() if self.kind == LANDLOCK else REACH.get(self.kind, REACH[NONE])
        if self.network == NO_NET:
            return said.replace(_NET, NO_NET_SAID[self.kind])
        if self.network == ALLOW_NET:
            hosts = self.allowed.said() if self.allowed else "none"
            way = SEATBELT_ALLOW_SAID if self.kind == SEATBELT else ALLOW_NET_SAID
            return said.replace(_NET, f"{way} (allowed: {hosts}; GENESIS_NETWORK_ALLOW adds hosts)")
        if self.network_wanted == ALLOW_NET:
            return said.replace(_NET, f"{_NET}: GENESIS_NETWORK=allowlist needs bubblewrap or Seatbelt, this box "
                                      f"cannot filter it")
        return said

    def _landlock_reach(self) -> str:
        if self.rules is not None and self.rules.sockets_scoped:
            return LANDLOCK_SCOPED
        if self.unix_filter is not None:
            return LANDLOCK_FILTERED
        return REACH[LANDLOCK].format(why=self.sockets_open or "Landlock cannot keep a socket file from it")

    def environment(self, env: Mapping[str, str], keys: tuple[str, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
        """The agent's environment in this box, and the names left out: the secrets and socket
        addresses dropped (boxenv.py) in every box but `off`; the CLI's `keys` pass."""
        if self.kind == OFF:
            return dict(env), ()
        passes = set(keys) | (allowed_env(env, self.places.allow) if self.places else set())
        kept, dropped = boxed_env(env, passes)
        if self.network == ALLOW_NET:  # the user's own proxy is no way out of an allow-listed box
            kept = {k: v for k, v in kept.items() if k.upper() not in net.PROXY_VARS}
        kept.update(self.proxy_env())
        if self.places is not None and self.places.private_home and self.kind in (BUBBLEWRAP, SEATBELT):
            kept.update(git_identity(env))
        return kept, dropped

    def proxy_env(self) -> dict[str, str]:
        """allowlist: the variables naming the box's only way out (its bridge to the proxy; in
        Seatbelt the proxy itself, known once it runs: none before)."""
        if self.network != ALLOW_NET:
            return {}
        if self.kind == SEATBELT:
            return net.proxy_env(self.proxy_port) if self.proxy_port else {}
        return net.proxy_env(net.proxy_port(self.allowed))

    def record(self) -> dict:
        """The ledger event's fields."""
        private = self.kind in (BUBBLEWRAP, SEATBELT) and self.places is not None
        return {"box": self.kind, "protects": self.line(), "reach": self.reach(), "weak": self.weak,
                "private_home": self.places.private_home if private else None,
                "home_kept": [p for p, _ in self.places.home_kept] if private else [],
                "sockets_hidden": (len(self.places.hidden.sockets) + len(self.places.hidden.folders)
                                   if self.kind == BUBBLEWRAP and self.places else 0),
                "protected": list(self.places.protected) if self.places and self.kind != LANDLOCK else [],
                "landlock_abi": self.rules.abi if self.rules else 0, "code_open": list(self.code_open()),
                "socket_filter": self.unix_filter is not None,
                "network": self.network, "network_wanted": self.network_wanted,
                "allowed": [e.said() for e in self.allowed.entries] if self.allowed else []}


def _landlock_writable(places: Places, env_tmpdir: str | None) -> tuple[str, ...]:
    # In a linked worktree, git's own places in the common dir too (objects, refs, logs and this
    # worktree's git dir), and not the rest of it: the fleet's state and the siblings stay out of reach.
    return tuple(p for p in (places.project, places.home, TMP, "/var/tmp", env_tmpdir, "/dev", *places.git_writable)
                 if p)


def _install(kind: str, why: str) -> str:
    how = {"bwrap": f"install it ({INSTALL_BWRAP})",
           LANDLOCK: "Landlock needs Linux 5.13 or newer with Landlock enabled (lsm=landlock)",
           SEATBELT: "Seatbelt (sandbox-exec) comes with macOS"}[kind]
    return (f"GENESIS_SANDBOX={kind}, but that box cannot run here ({why}): {how}, or choose "
            f"GENESIS_SANDBOX=auto (the best box this machine has) or GENESIS_SANDBOX=off (no box)")


def _bubblewrap(machine: Machine, places: Places) -> Box:
    """As root, the box drops every capability, or says it is weaker (never claims what it cannot keep)."""
    if machine.root and machine.root_why:
        return Box(BUBBLEWRAP, places, program=machine.bwrap, weak=machine.root_why)
    return Box(BUBBLEWRAP, places, program=machine.bwrap, root=machine.root)


def choose(setting: str, machine: Machine, places: Places, network: str = OPEN_NET,
           allowed: Allowlist | None = None) -> Box:
    """The box for GENESIS_SANDBOX on this machine; Unavailable for a named box that cannot run,
    or for GENESIS_NETWORK=none in a box that cannot take the network away. GENESIS_NETWORK=allowlist
    (the default) where the box cannot filter (Landlock, none, off) leaves the host's network, said."""
    box = _choose(setting, machine, places)
    if network == NO_NET and box.kind not in (BUBBLEWRAP, SEATBELT):
        raise Unavailable(f"GENESIS_NETWORK=none needs bubblewrap (Linux: {INSTALL_BWRAP}) or Seatbelt (macOS), and "
                          f"the agent's box here is {box.kind}: install bubblewrap, or set GENESIS_NETWORK=open")
    if network == ALLOW_NET and box.kind not in (BUBBLEWRAP, SEATBELT):
        return replace(box, network=OPEN_NET, network_wanted=ALLOW_NET)
    return replace(box, network=network, allowed=allowed if network == ALLOW_NET else None)


def _choose(setting: str, machine: Machine, places: Places) -> Box:
    def landlock_box() -> Box:
        allowed = tuple(a.path for a in places.allow)
        rules = landlock.prepare(_landlock_writable(places, places.tmpdir), machine.landlock_abi,
                                 (*NAME_SERVICES, *allowed))
        if rules.sockets_scoped:
            return Box(LANDLOCK, places, rules=rules)
        given = named_sockets(allowed)
        if given:  # the user's word wins: a filter would refuse their socket too
            return Box(LANDLOCK, places, rules=rules, sockets_open=(
                f"GENESIS_BOX_ALLOW gives {', '.join(given)}, and below Landlock ABI {landlock.RESOLVE_UNIX_ABI} "
                f"only a filter refusing every unix stream socket could keep the others away"))
        program = unixsockets.build(machine.arch)
        if program is None:
            return Box(LANDLOCK, places, rules=rules, sockets_open=(
                f"below Landlock ABI {landlock.RESOLVE_UNIX_ABI} only a seccomp filter keeps them away, and "
                f"Genesis has none for this machine ({machine.arch or 'unknown'})"))
        return Box(LANDLOCK, places, rules=rules, unix_filter=program)

    if setting == OFF:
        return Box(OFF, places)
    if setting == "bwrap":
        if machine.bwrap is None:
            raise Unavailable(_install("bwrap", machine.bwrap_why))
        return _bubblewrap(machine, places)
    if setting == LANDLOCK:
        if machine.landlock_abi < 1:
            raise Unavailable(_install(LANDLOCK, "the kernel has no Landlock"))
        return landlock_box()
    if setting == SEATBELT:
        if machine.seatbelt is None:
            raise Unavailable(_install(SEATBELT, "no sandbox-exec"))
        return Box(SEATBELT, places, program=machine.seatbelt)
    if machine.bwrap is not None:
        return _bubblewrap(machine, places)
    if machine.landlock_abi >= 1:
        return landlock_box()
    if machine.seatbelt is not None:
        return Box(SEATBELT, places, program=machine.seatbelt)
    why = machine.bwrap_why if os.uname().sysname == "Linux" else "no sandbox-exec"
    return Box(NONE, places, why_none=why)
