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
