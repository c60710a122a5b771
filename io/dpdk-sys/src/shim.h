/* The DPDK API dta uses: real functions come through bindgen, static-inline ones through the
 * dta_* wrappers in shim.c. */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

uint16_t dta_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t dta_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
struct rte_mbuf *dta_pktmbuf_alloc(struct rte_mempool *mp);
int dta_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n);
void dta_pktmbuf_free(struct rte_mbuf *m);
void dta_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int n);
char *dta_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
void *dta_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t dta_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t dta_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t dta_pktmbuf_nb_segs(const struct rte_mbuf *m);
int dta_errno(void);
unsigned int dta_lcore_id(void);
