"""Faults on a running fabric (see docs/faults.md): `catalogue` (every kind,
what it takes, what undoes it), the injector that applies them
(`injector.FaultInjector`) and their mechanisms (`outages`, `gray`, `rate`).
Nothing is imported here, so reading the catalogue loads no Mininet."""
