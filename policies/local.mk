# policies/: scheduling policies and their registry; included by Makefile.am
libsdp_a_SOURCES += policies/sdp_policies.h policies/registry.c policies/slidedp.c policies/slidedp_settings.c \
	policies/slidedp_internal.h policies/slidedp_methods.h policies/slidedp_heap.h \
	policies/slidedp_heap.c policies/roundpipe.c policies/roundpipe_flight.h policies/roundpipe_flight.c \
	policies/roundpipe_lpt.h
