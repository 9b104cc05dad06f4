/* notice.c - notices and dead letters through the outbox, and the owner of
 * strand.notices and strand.dead_letters (see notice.h). */
#include "strand/notice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/metrics.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/proto/strand.pb-c.h"
#include "strand/topics.h"
#include "strand/util.h"

#define NOTICE_MAX_TEXT 8000

/* Copies at most NOTICE_MAX_TEXT bytes of `text` (NULL: "") into a new string with
 * every byte that is not part of a well-formed UTF-8 sequence replaced by '?': the
 * outbox key and the notice's columns are text, and a notice about a bad message (an
 * ingress command whose target is not even UTF-8) must never fail its transaction.
 * Caller frees. */
static char *utf8_clean(const char *text)
{
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    size_t len = strlen((const char *)s);
    if (len > NOTICE_MAX_TEXT)
        len = NOTICE_MAX_TEXT;
    char *out = malloc(len + 1);
    if (out == NULL)
        return NULL;
    size_t i = 0, o = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 && c >= 0xC2 ? 2
                                : (c & 0xF0) == 0xE0                ? 3
                                : (c & 0xF8) == 0xF0 && c <= 0xF4   ? 4 : 0;
        int ok = n > 0 && i + n <= len;
        for (size_t k = 1; ok && k < n; k++)
            ok = (s[i + k] & 0xC0) == 0x80;
        /* overlong 3-byte forms, surrogates, and code points above U+10FFFF */
        if (ok && n == 3)
            ok = !(c == 0xE0 && s[i + 1] < 0xA0) && !(c == 0xED && s[i + 1] >= 0xA0);
        if (ok && n == 4)
            ok = !(c == 0xF0 && s[i + 1] < 0x90) && !(c == 0xF4 && s[i + 1] >= 0x90);
        if (!ok) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
    }
    out[o] = '\0';
    return out;
}

/* jsonb refuses the escape \u0000 that jansson writes for a NUL inside a string: it
 * becomes \ufffd in the stored copy (the published one keeps it). In place. */
static void json_drop_nul_escapes(char *text)
{
    for (char *p = text; *p; p++) {
        if (*p != '\\')
            continue;
        if (p[1] == 'u' && strncmp(p + 2, "0000", 4) == 0)
            memcpy(p + 2, "fffd", 4);
        if (p[1] != '\0')
            p++;   /* the escaped character is never an escape itself */
    }
}

/* Stores the notice (queued: sent with the transaction's next statement). Every text
 * is clean UTF-8 already; `instance_id` is stored only when it is a UUID. */
static st_err_t notice_store_tx(PGconn *conn, const char *code, const char *instance_id,
                                const char *signal_id, const char *message, char *detail_text,
                                st_errbuf_t *eb)
{
    static const char *const sql_notice_insert =
        "INSERT INTO strand.notices (code, instance_id, signal_id, message, detail)"
        " VALUES ($1, $2::uuid, $3, $4, $5::jsonb)";
    json_drop_nul_escapes(detail_text);
    const char *params[] = {code, instance_id && st_uuid_valid(instance_id) ? instance_id : NULL,
                            signal_id && signal_id[0] ? signal_id : NULL, message, detail_text};
    return st_pg_queue_bin(conn, sql_notice_insert, 5, params, NULL, NULL, eb);
}

st_err_t st_notice_add_tx(PGconn *conn, const char *code, const char *instance_id,
                          const char *signal_id, const char *message, const json_t *detail,
                          st_errbuf_t *eb)
{
    /* Text from a refused message may be anything: the outbox key, the published
     * envelope and the stored row all get the same clean UTF-8 copy. */
    char *c_code = utf8_clean(code), *c_instance = instance_id ? utf8_clean(instance_id) : NULL,
         *c_signal = utf8_clean(signal_id), *c_message = utf8_clean(message);
    char *detail_text = detail ? json_dumps(detail, JSON_COMPACT) : strdup("{}");
    uint8_t *buf = NULL;
    size_t len = 0;
    st_err_t err = ST_OK;
    Strand__V1__Notice msg = STRAND__V1__NOTICE__INIT;
    if (c_code == NULL || (instance_id && c_instance == NULL) || c_signal == NULL ||
        c_message == NULL || detail_text == NULL) {
        err = st_err_set(eb, ST_ERR_NOMEM, "could not encode a notice");
        goto done;
    }
    msg.envelope_version = 1;
    msg.code = c_code;
    msg.instance_id = c_instance ? c_instance : (char *)"";
    msg.signal_id = c_signal;
    msg.message = c_message;
    msg.occurred_at_ms = st_now_ms();
    msg.detail.data = (uint8_t *)detail_text;
    msg.detail.len = strlen(detail_text);
    len = strand__v1__notice__get_packed_size(&msg);
    buf = malloc(len ? len : 1);
    if (buf == NULL) {
        err = st_err_set(eb, ST_ERR_NOMEM, "could not encode a notice");
        goto done;
    }
    strand__v1__notice__pack(&msg, buf);
    err = st_outbox_add_tx(conn, ST_TOPIC_NOTICES, c_instance, buf, len, eb);
    if (err == ST_OK)
        err = notice_store_tx(conn, c_code, c_instance, c_signal, c_message, detail_text, eb);
    if (err == ST_OK) {
        char labels[96];
        snprintf(labels, sizeof labels, "code=\"%s\"", code);
        st_metric_inc(st_metrics_counter("strand_notices_total", "Notices raised", labels));
    }
done:
    free(buf);
    free(detail_text);
    free(c_code);
    free(c_instance);
    free(c_signal);
    free(c_message);
    return err;
}

st_err_t st_dead_letter_add_tx(PGconn *conn, const st_dead_letter_source_t *src,
                               const char *reason, int attempts, const char *node_id,
                               const void *payload, size_t len, st_errbuf_t *eb)
{
    static const char *const sql_dead_letter_insert =
        "INSERT INTO strand.dead_letters (source_topic, source_partition, source_offset,"
        " instance_id, reason, attempts, node_id, payload, signal_id)"
        " VALUES ($1, $2, $3, $4::uuid, $5, $6, $7, $8, $9)";
    char partition[16], offset[24], attempts_text[16];
    snprintf(partition, sizeof partition, "%d", src->partition);
    snprintf(offset, sizeof offset, "%lld", src->offset);
    snprintf(attempts_text, sizeof attempts_text, "%d", attempts);
    const char *instance = src->instance_id && st_uuid_valid(src->instance_id)
                               ? src->instance_id : NULL;
    /* A tombstone has no payload; the column is NOT NULL, and a failing insert must not
     * be what stops a consumer. An oversized payload is not kept: the DLQ envelope
     * would exceed the broker's message limit and stop the relay instead. */
    char full_reason[600];
    if (len > ST_DEAD_LETTER_MAX_PAYLOAD) {
        snprintf(full_reason, sizeof full_reason, "%s (payload of %zu bytes not kept)", reason,
                 len);
        reason = full_reason;
        len = 0;
    }
    if (payload == NULL || len == 0)
        payload = "", len = 0;
    /* The reason may quote a refused message and the signal id comes from one: clean
     * UTF-8 for the text columns, or the insert fails and the consumer cannot move on. */
    char *clean_reason = utf8_clean(reason);
    char *signal_id = src->signal_id && src->signal_id[0] ? utf8_clean(src->signal_id) : NULL;
    if (clean_reason == NULL || (src->signal_id && src->signal_id[0] && signal_id == NULL)) {
        free(clean_reason);
        free(signal_id);
        return st_err_set(eb, ST_ERR_NOMEM, "could not copy a dead letter's reason");
    }
    reason = clean_reason;
    const char *params[] = {src->topic, partition, offset, instance, reason,
                            attempts_text, node_id, payload, signal_id};
    int lengths[] = {0, 0, 0, 0, 0, 0, 0, (int)len, 0};
    int formats[] = {0, 0, 0, 0, 0, 0, 0, 1, 0};
    st_err_t err = st_pg_exec_bin(conn, sql_dead_letter_insert, 9, params, lengths, formats,
                                  NULL, eb);
    free(signal_id);
    if (err != ST_OK) {
        free(clean_reason);
        return err;
    }
    Strand__V1__DeadLetter msg = STRAND__V1__DEAD_LETTER__INIT;
    msg.envelope_version = 1;
    msg.source_topic = (char *)src->topic;
    msg.source_partition = src->partition;
    msg.source_offset = src->offset;
    msg.reason = (char *)reason;
    msg.attempts = (uint32_t)attempts;
    msg.node_id = (char *)node_id;
    msg.original.data = (uint8_t *)(len ? payload : NULL);
    msg.original.len = len;
    msg.occurred_at_ms = st_now_ms();
    size_t out_len = strand__v1__dead_letter__get_packed_size(&msg);
    uint8_t *buf = malloc(out_len ? out_len : 1);
    if (buf == NULL) {
        free(clean_reason);
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode a dead letter");
    }
    strand__v1__dead_letter__pack(&msg, buf);
    free(clean_reason);
    err = st_outbox_add_tx(conn, ST_TOPIC_DLQ, instance, buf, out_len, eb);
    free(buf);
    if (err == ST_OK)
        st_metric_inc(st_metrics_counter("strand_dead_letters_total",
                                         "Messages moved to the dead-letter store", NULL));
    return err;
}

st_err_t st_dead_letter_settle_tx(PGconn *conn, const char *id, const char *status, int *found,
                                  st_dead_letter_t *out, st_errbuf_t *eb)
{
    static const char *const sql_dead_letter_claim =
        "UPDATE strand.dead_letters SET status = $2 WHERE id = $1::bigint AND status = 'open'"
        " RETURNING source_topic, instance_id, payload";
    const char *params[] = {id, status};
    PGresult *res = NULL;
    /* Binary results: the payload comes back as raw bytes, the uuid as 16 bytes. */
    st_err_t err = st_pg_exec_format(conn, sql_dead_letter_claim, 2, params, NULL, NULL, 1, &res,
                                     eb);
    if (err != ST_OK)
        return err;
    *found = PQntuples(res) > 0;
    if (*found && out != NULL) {
        snprintf(out->topic, sizeof out->topic, "%s", PQgetvalue(res, 0, 0));
        out->key[0] = '\0';
        if (!PQgetisnull(res, 0, 1) && PQgetlength(res, 0, 1) == 16) {
            const unsigned char *b = (const unsigned char *)PQgetvalue(res, 0, 1);
            snprintf(out->key, sizeof out->key,
                     "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                     b[12], b[13], b[14], b[15]);
        }
        out->len = (size_t)PQgetlength(res, 0, 2);
        out->payload = malloc(out->len + 1);
        if (out->payload == NULL) {
            PQclear(res);
            return st_err_set(eb, ST_ERR_NOMEM, "could not copy a dead letter");
        }
        memcpy(out->payload, PQgetvalue(res, 0, 2), out->len);
    }
    PQclear(res);
    return ST_OK;
}

st_err_t st_dead_letter_set_payload_tx(PGconn *conn, const char *id, const void *payload, size_t len,
                                       st_errbuf_t *eb)
{
    static const char *const sql_dead_letter_payload =
        "UPDATE strand.dead_letters SET payload = $2 WHERE id = $1::bigint AND status = 'open'"
        " RETURNING 1";
    const char *params[] = {id, payload};
    const int lengths[] = {0, (int)len};
    const int formats[] = {0, 1};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec_bin(conn, sql_dead_letter_payload, 2, params, lengths, formats, &res, eb);
    if (err != ST_OK)
        return err;
    int found = PQntuples(res) > 0;
    PQclear(res);
    return found ? ST_OK : st_err_set(eb, ST_ERR_NOT_FOUND, "no open dead letter %s", id);
}
