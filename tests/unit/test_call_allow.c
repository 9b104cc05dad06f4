/* test_call_allow.c - the outbound call allow-list: entry syntax, the address classes
 * refused by default, host, host:port and CIDR entries. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "st_test.h"
#include "strand/call_allow.h"

/* Whether a call to `host`:`port` may connect to the IP `ip`. */
static int allowed(const char *host, int port, const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &in6->sin6_addr);
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        inet_pton(AF_INET, ip, &in->sin_addr);
    }
    char why[256];
    return st_call_allow_check(host, port, (struct sockaddr *)&ss, why, sizeof why);
}

static void test_default_refuses_internal(void)
{
    CU_ASSERT_EQUAL(st_call_allow_set(NULL, NULL), ST_OK);
    CU_ASSERT_TRUE(allowed("example.com", 443, "93.184.216.34"));
    CU_ASSERT_TRUE(allowed("x", 80, "2606:2800:220:1::1"));
    const char *refused[] = {"127.0.0.1", "127.9.9.9", "10.1.2.3", "172.16.0.1", "172.31.255.255",
                             "192.168.1.1", "169.254.169.254", "0.0.0.0", "100.64.0.1",
                             "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::1",
                             "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
                             "64:ff9b::a00:1"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        CU_ASSERT_FALSE(allowed("x", 80, refused[i]));
    CU_ASSERT_TRUE(allowed("x", 80, "172.32.0.1"));   /* just outside 172.16/12 */
    CU_ASSERT_TRUE(allowed("x", 80, "::ffff:8.8.8.8"));
}

static void test_entries(void)
{
    CU_ASSERT_EQUAL(st_call_allow_set(" 127.0.0.1:8088 , Worker.Apps ,10.96.0.0/12, [::1]:9000", NULL),
                    ST_OK);
    CU_ASSERT_TRUE(allowed("127.0.0.1", 8088, "127.0.0.1"));
    CU_ASSERT_FALSE(allowed("127.0.0.1", 8080, "127.0.0.1"));    /* another port */
    CU_ASSERT_FALSE(allowed("localhost", 8088, "127.0.0.1"));    /* the name is not listed */
    CU_ASSERT_TRUE(allowed("worker.apps", 1234, "10.200.0.5"));   /* any port, case-insensitive */
    CU_ASSERT_TRUE(allowed("other", 80, "10.100.1.1"));          /* in 10.96.0.0/12 */
    CU_ASSERT_FALSE(allowed("other", 80, "10.112.0.1"));         /* outside it */
    CU_ASSERT_TRUE(allowed("::1", 9000, "::1"));
    CU_ASSERT_FALSE(allowed("::1", 9001, "::1"));
    CU_ASSERT_EQUAL(st_call_allow_set("*", NULL), ST_OK);
    CU_ASSERT_TRUE(allowed("x", 80, "169.254.169.254"));
}

static void test_bad_entries_keep_the_list(void)
{
    CU_ASSERT_EQUAL(st_call_allow_set("127.0.0.1:8088", NULL), ST_OK);
    const char *bad[] = {"10.0.0.0/33", "host:0", "host:99999", "a b", "[::1", "1.2.3.4/x",
                         "http://x", "/8", "host:80:90x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st_errbuf_t eb;
        CU_ASSERT_EQUAL(st_call_allow_set(bad[i], &eb), ST_ERR_CONFIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_CALL_ALLOW"));
    }
    CU_ASSERT_TRUE(allowed("127.0.0.1", 8088, "127.0.0.1"));   /* the old list stays */
    CU_ASSERT_EQUAL(st_call_allow_set("", NULL), ST_OK);
    CU_ASSERT_FALSE(allowed("127.0.0.1", 8088, "127.0.0.1"));
}

ST_TEST_MAIN("call_allow", ST_TEST(test_default_refuses_internal), ST_TEST(test_entries),
             ST_TEST(test_bad_entries_keep_the_list))
