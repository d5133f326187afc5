# graph/: training-step task graphs (sdp_task_* and sdp_rt_tensor_* only); included by Makefile.am
libsdp_a_SOURCES += graph/step.h graph/plan.h graph/graph_internal.h graph/plan.c graph/common.c \
	graph/layer.c graph/moe.c graph/lora.c graph/seq.c graph/routes.c graph/nodes.c graph/optim.c graph/embed.c graph/step.c \
	graph/cost.c \
	graph/sweep.h graph/sweep.c graph/predict.h graph/predict.c \
	graph/predict_internal.h graph/predict_sim.c graph/predict_mem.c graph/predict_nodes.c \
	graph/choose.h graph/choose.c \
	graph/split.h graph/split.c graph/predict_ops.h graph/predict_ops.c
