"""Effects: what crashwatch does with the aggregator's output (print it, plan or send status patches).

Each sink consumes batches from a memory object stream of its own and never re-derives a diagnosis.
"""
