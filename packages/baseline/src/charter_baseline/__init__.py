"""Charter baseline: secure default policy manifests, shipped as YAML package data.

`load_baseline_policies("coding-agent")` returns the policies of a baseline, ready for
``charter.Governor(policies=...)``; `baseline_path(name)` is the manifest file itself (for
``policy_file=``, ``charter check``, ``charter replay --policy``, or to copy and adapt);
`baseline_names()` lists what is shipped. Every policy says in its description what it stops
and why (``charter baseline show NAME``).
"""

from ._load import baseline_description, baseline_names, baseline_path, load_baseline_policies

__all__ = [
    "baseline_description",
    "baseline_names",
    "baseline_path",
    "load_baseline_policies",
]
