"""The benchmark sections, in report order: one module of testbed/bench/ per
section, named by its key, imported only when it runs (so that
`mrc-testbed --help` loads neither matplotlib nor Mininet)."""

SECTIONS = ('load_balance', 'failover', 'routed_failover', 'random_loss',
            'incast', 'emulator_scale')
