/* test_signal.c - the signal envelope: round trip and rejection of bad messages. */
#include <stdlib.h>
#include <string.h>

#include "st_test.h"
#include "strand/proto/strand.pb-c.h"
#include "strand/signal.h"
#include "strand/util.h"

static void test_round_trip(void)
{
    char id[37];
    st_uuid_new(id);
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_TASK_COMPLETED, id, 7);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "tok-1");
    sig.payload = json_pack("{s:s, s:i}", "answer", "yes", "n", 3);
    uint8_t *buf;
    size_t len;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_signal_encode(&sig, &buf, &len, &eb), ST_OK);
    st_signal_t back;
    CU_ASSERT_EQUAL_FATAL(st_signal_decode(buf, len, &back, &eb), ST_OK);
    CU_ASSERT_STRING_EQUAL(back.signal_id, sig.signal_id);
    CU_ASSERT_STRING_EQUAL(back.instance_id, id);
    CU_ASSERT_EQUAL(back.type, ST_SIGNAL_TASK_COMPLETED);
    CU_ASSERT_EQUAL(back.expected_version, 7);
    CU_ASSERT_STRING_EQUAL(back.waiting_token, "tok-1");
    CU_ASSERT_TRUE(json_equal(back.payload, sig.payload));
    CU_ASSERT_STRING_EQUAL(st_signal_type_name(back.type), "TASK_COMPLETED");
    free(buf);
    st_signal_close(&sig);
    st_signal_close(&back);
}

static void test_rejects_garbage(void)
{
    st_signal_t out;
    st_errbuf_t eb;
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    CU_ASSERT_EQUAL(st_signal_decode(junk, sizeof junk, &out, &eb), ST_ERR_INVALID);
    CU_ASSERT_PTR_NULL(out.payload);
}

/* Packs a hand-made Signal with one field broken, and checks it is refused. */
static void expect_refused(Strand__V1__Signal *msg, const char *fragment)
{
    size_t len = strand__v1__signal__get_packed_size(msg);
    uint8_t *buf = malloc(len + 1);
    strand__v1__signal__pack(msg, buf);
    st_signal_t out;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_signal_decode(buf, len, &out, &eb), ST_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, fragment));
    free(buf);
}

static void test_rejects_bad_fields(void)
{
    char id[37];
    st_uuid_new(id);
    Strand__V1__Signal msg = STRAND__V1__SIGNAL__INIT;
    msg.envelope_version = 1;
    msg.signal_id = "s1";
    msg.instance_id = id;
    msg.type = STRAND__V1__SIGNAL_TYPE__SIGNAL_TYPE_START;
    msg.payload.data = (uint8_t *)"{}";
    msg.payload.len = 2;

    msg.envelope_version = 9;
    expect_refused(&msg, "envelope version");
    msg.envelope_version = 1;
    msg.instance_id = "not-a-uuid";
    expect_refused(&msg, "UUID");
    msg.instance_id = id;
    msg.signal_id = "";
    expect_refused(&msg, "signal_id");
    msg.signal_id = "s1";
    msg.payload.data = (uint8_t *)"[1]";
    msg.payload.len = 3;
    expect_refused(&msg, "JSON object");
    msg.payload.data = (uint8_t *)"{";
    msg.payload.len = 1;
    expect_refused(&msg, "JSON object");
}

ST_TEST_MAIN("signal", ST_TEST(test_round_trip), ST_TEST(test_rejects_garbage),
             ST_TEST(test_rejects_bad_fields))
