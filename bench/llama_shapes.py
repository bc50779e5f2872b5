"""llama_shapes.py - the Llama shapes the PyTorch baselines build
(transformers LlamaConfig keyword arguments), one table for every
*_l4l.py script and bench/torch_fsdp_llm.py, matching mgrun's model
presets of the same names (plugins/models/llama/llama_config.c).
Pure data: no torch import."""

_LLAMA3 = dict(vocab_size=128256, num_key_value_heads=8, rope_theta=500000.0,
               max_position_embeddings=8192)

LLAMA_SHAPES = {
    "llama3.2-1b": dict(_LLAMA3, hidden_size=2048, intermediate_size=8192,
                        num_hidden_layers=16, num_attention_heads=32,
                        tie_word_embeddings=True),
    "llama3.2-3b": dict(_LLAMA3, hidden_size=3072, intermediate_size=8192,
                        num_hidden_layers=28, num_attention_heads=24,
                        tie_word_embeddings=True),
    "llama3-8b": dict(_LLAMA3, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32,
                      tie_word_embeddings=False),
    # ../shared/baselines/torch_fsdp.py's model (transformers' defaults
    # for the rest: rope_theta 10000, untied)
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008,
                      num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, vocab_size=32000,
                      max_position_embeddings=4096),
}


def model_flops_per_token(shape, seq, trained="all"):
    """Model FLOPs a token costs in one training step (forward and
    backward, recomputation not counted), the figure MFU divides by: the
    matrix products of every linear layer (the output head included, the
    input embedding's lookup not) - 6 per weight when the weights train,
    4 when they are frozen (LoRA: forward and the input gradient; the
    adapters' own products are under 0.5% at rank 8 and left out) - plus
    causal attention's two products per layer: QK^T and PV, 2 T hd
    FLOPs a head each over the T/2 keys a query sees on average, times 3
    for forward and backward: 6 L T D per token (D = heads x head_dim)."""
    s = LLAMA_SHAPES[shape]
    d, f, n_layers = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
    h, kv = s["num_attention_heads"], s["num_key_value_heads"]
    hd = d // h
    per_layer = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f
    linear = n_layers * per_layer + s["vocab_size"] * d  # + the head
    mul = {"all": 6, "frozen": 4}[trained]
    return mul * linear + 6 * n_layers * seq * h * hd
