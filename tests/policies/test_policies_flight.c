/* SPDX-License-Identifier: MIT */
/* sdp-roundpipe's micro-batches in flight (policies/roundpipe_flight.h) on submission and end
 * sequences written out by hand: which micro-batches the tracker admits after each event, against
 * the rule "record n runs while n < (the oldest unfinished record) + limit", where a record is
 * finished once a later one was submitted and every task of it ended.  No StarPU. */
#include "config.h"

#include <stdio.h>

#include "policies/roundpipe_flight.h"

static int fails, checks;

/* admits(step, mb) is want */
static void expect(const struct sdp_rp_flight *f, int step, int mb, int want, const char *when)
{
    int got = sdp_rp_flight_admits(f, step, mb);
    checks++;
    if (got != want) {
        fprintf(stderr, "FAIL %s: micro-batch (%d, %d) %s, want %s\n", when, step, mb,
                got ? "admitted" : "held", want ? "admitted" : "held");
        fails++;
    }
}

static void expect_rc(int got, int want, const char *what)
{
    checks++;
    if (got != want) {
        fprintf(stderr, "FAIL %s: returned %d, want %d\n", what, got, want);
        fails++;
    }
}

/* One step of 4 micro-batches, 2 tasks each, limit 2: micro-batch k + 2 enters when k leaves. */
static void test_one_step(void)
{
    struct sdp_rp_flight f;
    sdp_rp_flight_init(&f, 2);
    for (int mb = 0; mb < 4; mb++)
        for (int t = 0; t < 2; t++)
            expect_rc(sdp_rp_flight_submit(&f, 0, mb), 0, "submit: nothing finished");
    expect(&f, 0, 0, 1, "submitted");
    expect(&f, 0, 1, 1, "submitted");
    expect(&f, 0, 2, 0, "submitted");
    expect(&f, 0, 3, 0, "submitted");
    expect_rc(sdp_rp_flight_end(&f, 0, 0), 0, "first task of mb 0 ends");
    expect(&f, 0, 2, 0, "mb 0 half done");
    expect_rc(sdp_rp_flight_end(&f, 0, 1), 0, "mb 1 ends before mb 0");
    expect_rc(sdp_rp_flight_end(&f, 0, 1), 0, "mb 1 done, mb 0 not");
    expect(&f, 0, 2, 0, "mb 1 done first: in order, mb 0 still the oldest");
    expect_rc(sdp_rp_flight_end(&f, 0, 0), 1, "mb 0 done: mb 0 and 1 leave");
    expect(&f, 0, 2, 1, "mb 0 and 1 done");
    expect(&f, 0, 3, 1, "mb 0 and 1 done");
    /* a task of no record kept (finished, or never submitted) is not held */
    expect(&f, 0, 0, 1, "finished record");
    expect(&f, 5, 0, 1, "unknown record");
    sdp_rp_flight_free(&f);
}

/* The last record is sealed by the next step's first submission, which may so finish it. */
static void test_seal(void)
{
    struct sdp_rp_flight f;
    sdp_rp_flight_init(&f, 1);
    sdp_rp_flight_submit(&f, 0, 0);
    sdp_rp_flight_submit(&f, 0, 1);
    expect(&f, 0, 1, 0, "limit 1");
    expect_rc(sdp_rp_flight_end(&f, 0, 0), 1, "mb 0 done");
    expect(&f, 0, 1, 1, "mb 0 done");
    expect_rc(sdp_rp_flight_end(&f, 0, 1), 0, "the last record is not sealed yet");
    sdp_rp_flight_submit(&f, 0, 1); /* more of the same micro-batch: still open */
    expect_rc(sdp_rp_flight_submit(&f, 1, 0), 0, "sealed, a task still to end");
    expect(&f, 1, 0, 0, "step 0's last micro-batch unfinished");
    expect_rc(sdp_rp_flight_end(&f, 0, 1), 1, "step 0's last micro-batch done");
    expect(&f, 1, 0, 1, "step 0 done");
    /* every task of the open record ended before the next record came: its submission frees */
    expect_rc(sdp_rp_flight_end(&f, 1, 0), 0, "step 1 mb 0 done, open");
    expect_rc(sdp_rp_flight_submit(&f, 1, 1), 1, "submit seals a finished record");
    expect(&f, 1, 1, 1, "step 1 mb 0 gone");
    sdp_rp_flight_free(&f);
}

/* Many records (the ring grows) with limit 3: exactly the 3 oldest unfinished run. */
static void test_many(void)
{
    struct sdp_rp_flight f;
    char when[64];
    sdp_rp_flight_init(&f, 3);
    for (int mb = 0; mb < 40; mb++)
        sdp_rp_flight_submit(&f, 2, mb);
    for (int done = 0; done < 39; done++) {
        snprintf(when, sizeof(when), "%d micro-batches done", done);
        for (int mb = 0; mb < 40; mb++)
            expect(&f, 2, mb, mb < done || mb < done + 3, when);
        sdp_rp_flight_end(&f, 2, done);
    }
    sdp_rp_flight_free(&f);
}

int main(void)
{
    test_one_step();
    test_seal();
    test_many();
    printf("%d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
