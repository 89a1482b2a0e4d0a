"""The worker's life for every cell kind: spawn, poll, time out, kill, restart after the
lost case, scheduling, busy-machine marks, scratch folders, progress lines."""
