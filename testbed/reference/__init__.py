"""The reference simulator (UEC's htsim) run beside the emulation: its
inputs made from a scenario, its results read and compared with ours."""
