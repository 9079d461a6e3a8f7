"""Scenarios, workloads and the runs that compare transports on them."""
