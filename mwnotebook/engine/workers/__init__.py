"""The workers as the engine holds them: a connection to each kernel, its wire, the set-up code,
their start and replacement."""
