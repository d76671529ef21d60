"""Structure tests: the shape of the tree (layers, cycles, wiring, row shapes,
declared dependencies), read from the code with ast."""
