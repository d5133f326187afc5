# runtime/local.mk: StarPU start-up, tensors, the training state, hints (included by Makefile.am)
libsdp_a_SOURCES += runtime/hint.h runtime/hint.c
libsdp_a_SOURCES += runtime/tensor.h runtime/tensor_starpu.h runtime/tensor.c
libsdp_a_SOURCES += runtime/init.h runtime/init.c runtime/nodes.h runtime/nodes.c runtime/gpu_link.h runtime/gpu_link.c runtime/census.h runtime/census.c
libsdp_a_SOURCES += runtime/state.h runtime/state.c runtime/state_hf.c runtime/state_lora.h runtime/state_lora.c runtime/peft.h runtime/peft.c
