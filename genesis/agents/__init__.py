"""Everything that depends on which agent CLI runs, behind one small interface.

The loop asks the adapter for the command line of a phase, for a reader that turns the
agent's output into a readable transcript and into what the loop must know at the end
(a usage limit, an API error, the result and its cost), and for the hook check. Claude
Code is the first implementation; any other command runs as a generic text CLI.
"""

from __future__ import annotations

from pathlib import Path

from .base import Adapter, ApiError, ApiRetry, Ending, Limit, OutputReader, Result, TextReader

__all__ = ["adapter_for", "Adapter", "ApiError", "ApiRetry", "Ending", "Limit", "OutputReader", "Result",
           "TextReader"]


def adapter_for(argv: tuple[str, ...]) -> Adapter:
    """The adapter of the CLI that argv runs, chosen by the program's name."""
    from .claude import ClaudeCode

    name = Path(argv[0]).name if argv else ""
    if name == ClaudeCode.program:
        return ClaudeCode()
    return Adapter()
