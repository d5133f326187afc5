/* SPDX-License-Identifier: MIT */
/* The switch of runtime/hint.h. */
#include "config.h"

#include "runtime/hint.h"

static int on_;

void sdp_hint_for_policy(int on)
{
    __atomic_store_n(&on_, on, __ATOMIC_RELEASE);
}

int sdp_hint_for_policy_on(void)
{
    return __atomic_load_n(&on_, __ATOMIC_ACQUIRE);
}
