# codelets/: one file per op (StarPU codelet, perfmodel, sdp_task_<op>()); included by Makefile.am
libsdp_a_SOURCES += codelets/sdp_tasks.h codelets/cl_common.h codelets/cl_common.c \
	codelets/codelets_internal.h codelets/ops.c codelets/tasks.c codelets/cast.c codelets/embedding.c codelets/matmul.c codelets/lora.c \
	codelets/rmsnorm.c codelets/qknorm_rope.c codelets/attention.c codelets/swiglu.c codelets/moe.c codelets/moe_internal.h codelets/lmhead_ce.c \
	codelets/adamw.c codelets/zero.c codelets/grad_reduce.c codelets/param_copy.c \
	codelets/nccl.c codelets/node_xfer.c codelets/node_nccl.c
if SDP_SIMGRID
libsdp_a_SOURCES += codelets/sim.c
endif
