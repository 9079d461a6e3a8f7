"""The kernel's own TCP and MPTCP as baselines over the uSID fabric:
`transports.KernelTransports` (flows driven from this process), the routes,
the path manager and the socket introspection they use. See
docs/kernel-baselines.md."""
