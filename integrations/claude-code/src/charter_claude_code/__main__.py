"""``python -m charter_claude_code``: the hook itself (same as ``charter-claude-hook``)."""

from charter_claude_code._hook import main

main()
