/*
 * peft.h - LoRA adapters out of a run checkpoint into the folder layout
 * Hugging Face PEFT loads (adapter_config.json + adapter_model.safetensors),
 * so an adapter trained here goes straight to peft.PeftModel.
 */
#ifndef MG_PEFT_H
#define MG_PEFT_H

#include "mg/mg.h"
#include "runtime/safetensors.h"

/*
 * When the model plugin declares a lora_rank option and it is > 0, write
 * run_dir/adapter/ from the checkpoint being written (w, rank 0): every
 * "param/<module>.lora_A.weight" / "lora_B.weight" under PEFT's key
 * "base_model.model.<module>...", in F32, and the config from the
 * model's lora_alpha, lora_dropout, rslora and hf_dir options (r and
 * target_modules from the tensors). Returns 0 (nothing to do or done),
 * or -1 after mg_error().
 */
int mg_peft_export(const struct mg_st_writer *w, const struct mg_plugin *model,
		   const struct mg_opts *mo, const char *run_dir);

#endif
