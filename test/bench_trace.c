// What one trace call costs (scripts/measure.sh overhead): a begin/end pair on the step's thread,
// recording (--trace) and not (the step log's times only), and a trace_span (a collective), each
// the best of 5 rounds of 500,000, in nanoseconds. Times the number of events a traced step
// records, this bounds what tracing adds to a step, apart from the clock reads the step log
// makes anyway.
#include <stdio.h>
#include "core/trace.h"

static double round_ns(int recording, int kind) {
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        Trace t;
        trace_init(&t, 0, recording);
        trace_step_begin(&t, 1);
        const int n = 500000;
        double t0 = trace_now();
        for (int i = 0; i < n; i++) {
            if (kind == 0) { double s = trace_begin(&t, "forward", TRACE_FORWARD, i & 15, 0.0); trace_end(&t, s); }
            else trace_span(&t, "all_gather", TRACE_COMM, i & 15, 1e6, t0, t0 + 1e-6);
        }
        double ns = (trace_now() - t0) / n * 1e9;
        if (ns < best) best = ns;
        trace_free(&t);
    }
    return best;
}

int main(void) {
    printf("trace_begin + trace_end, recording:     %.1f ns\n", round_ns(1, 0));
    printf("trace_begin + trace_end, not recording: %.1f ns\n", round_ns(0, 0));
    printf("trace_span, recording:                  %.1f ns\n", round_ns(1, 1));
    printf("trace_now (clock_gettime):              ");
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = trace_now(), x = 0;
        for (int i = 0; i < 500000; i++) x += trace_now();
        double ns = (trace_now() - t0) / 500000 * 1e9;
        if (ns < best && x > 0) best = ns;
    }
    printf("%.1f ns\n", best);
    return 0;
}
