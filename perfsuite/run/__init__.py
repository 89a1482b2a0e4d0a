"""Run: execute a plan in isolated worker processes (run, sweep), gate each
method's correctness, and turn what the workers measured into rows."""
