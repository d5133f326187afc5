# policies/: scheduling policies and their registry; included by Makefile.am
libsdp_a_SOURCES += policies/sdp_policies.h policies/registry.c policies/slidedp.c policies/slidedp_settings.c \
	policies/slidedp_internal.h policies/slidedp_methods.h policies/roundpipe.c
