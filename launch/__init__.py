"""Reading a launch without running it: the script, its exports and `cd`, the interpreter, the entry and the overrides (Hydra's grammar)."""
