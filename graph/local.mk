# graph/: training-step task graphs (sdp_task_* and sdp_rt_tensor_* only); included by Makefile.am
libsdp_a_SOURCES += graph/step.h graph/step.c
