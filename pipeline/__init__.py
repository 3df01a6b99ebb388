"""The pure core: the crash-loop rule, the event filter, the aggregator and the graph policy.

Nothing here opens a socket or a file or imports a Kubernetes client; time comes from the events.
"""
