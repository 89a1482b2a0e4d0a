"""``perfsuite converge``: does swapping the loss change what the model learns? The same
tiny Llama trained from the same seed on the same data once per method x beta x dtype,
held out and judged against eager (docs/converge.md)."""
