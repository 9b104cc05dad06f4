/*
 * fuzz_signal.c - libFuzzer harness for the decoders of bytes that arrive from Kafka:
 * the Signal envelope (executor) and the IngressCommand envelope (API ingress).
 * Any input must be decoded or refused with ST_ERR_INVALID; never crash or leak.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "strand/proto/strand.pb-c.h"
#include "strand/signal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_signal_t sig;
    st_errbuf_t eb;
    if (st_signal_decode(data, size, &sig, &eb) == ST_OK) {
        uint8_t *buf;
        size_t len;
        /* A decoded signal must encode again and decode to the same identity. */
        if (st_signal_encode(&sig, &buf, &len, &eb) != ST_OK)
            abort();
        st_signal_t again;
        if (st_signal_decode(buf, len, &again, &eb) != ST_OK)
            abort();
        if (again.type != sig.type || again.expected_version != sig.expected_version)
            abort();
        st_signal_close(&again);
        free(buf);
        st_signal_close(&sig);
    }
    Strand__V1__IngressCommand *cmd = strand__v1__ingress_command__unpack(NULL, size, data);
    if (cmd != NULL)
        strand__v1__ingress_command__free_unpacked(cmd, NULL);
    return 0;
}
