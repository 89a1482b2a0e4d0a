"""Train a transformers causal LM on our loss: one line patches it, nothing else changes.

    python examples/patch_model.py

The patched forward never builds the N×V logits for the loss; unpatch restores the model.
"""

import logging

# Two messages from other projects, not this example's to fix: torchao (which transformers
# imports) logs each CUDA-only library of its own it cannot load here, and torch says that
# torchao registers its Enums with pytree the deprecated way. Only those two are dropped.
logging.getLogger("torchao").addFilter(lambda r: not r.getMessage().startswith("Failed to load"))
logging.getLogger("torch.utils._pytree").addFilter(
    lambda r: "is an Enum subclass" not in r.getMessage()
)

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from perfsuite.kernels import patch, unpatch  # noqa: E402

sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
model = LlamaForCausalLM(LlamaConfig(vocab_size=512, **sizes))
patch(model, label_smoothing=0.1)  # the whole adoption
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
input_ids = torch.randint(0, model.config.vocab_size, (4, 32))
loss = model(input_ids, labels=input_ids).loss
loss.backward()
optimizer.step()
unpatch(model)  # back to the stock forward: logits and transformers' own loss
print(f"one AdamW step, loss {loss.item():.4f}")
