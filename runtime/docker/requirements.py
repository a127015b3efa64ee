"""Print the dependencies of scorestream and of the given extras, as pyproject.toml declares them.

The images install these in a layer of their own, under requirements.lock, before the project's
code: the layer changes only with the pins, so a change to the code rebuilds seconds, not minutes.

    python requirements.py pyproject.toml [EXTRA...]
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
deps = [] if "--extras-only" in sys.argv else list(project["dependencies"])
for extra in (a for a in sys.argv[2:] if not a.startswith("--")):
    deps += [d for d in project["optional-dependencies"][extra] if not d.startswith("scorestream[")]
print("\n".join(deps))
