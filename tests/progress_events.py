"""What a progress generator yields, and what it returns: ``events, value = drain(gen)`` (tests only;
``engine.progress.run_to_end`` keeps only the value)."""


def drain(gen):
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value
