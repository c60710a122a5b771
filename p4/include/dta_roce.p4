/* dta_roce.p4: what every program here that builds RoCEv2 frames shares (P4_16, TNA).
 *
 * Included by the translator (p4/translator/dta_translator.p4, its ICRC pipe) and by the DART
 * build of the reporter (p4/reporter/dta_reporter.p4 -DDTA_DART), after dta_constants.p4:
 * the Ethernet/IPv4/UDP and InfiniBand header types, the CRC engine of the hash profiles, the
 * frame skeleton of proto's FrameTemplate and the ICRC input of a frame. The macros that read
 * `hdr.` expect a headers struct with fields named as here (ethernet, ipv4, udp, bth, reth,
 * kw_payload, icrc).
 */

#ifndef DTA_ROCE_P4
#define DTA_ROCE_P4

header ethernet_h { bit<48> dst; bit<48> src; bit<16> ether_type; }

header ipv4_h {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len; bit<16> ident;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> checksum;
    bit<32> src; bit<32> dst;
}

header udp_h { bit<16> src_port; bit<16> dst_port; bit<16> len; bit<16> checksum; }

header bth_h {
    bit<8> opcode; bit<1> se; bit<1> mig_req; bit<2> pad; bit<4> tver; bit<16> pkey;
    bit<1> fecn; bit<1> becn; bit<6> resv6; bit<24> dest_qp; bit<1> ack_req; bit<7> resv7;
    bit<24> psn;
}
header aeth_h { bit<8> syndrome; bit<24> msn; }
/* 64-bit addresses as two 32-bit halves: Tofino-1 adds at most 32 bits per operation (the
 * low half is added, the high half chosen by the carry; see `addr_carry`). Same bytes. */
header reth_h { bit<32> va_hi; bit<32> va_lo; bit<32> rkey; bit<32> dma_len; }
header atomic_eth_h { bit<32> va_hi; bit<32> va_lo; bit<32> rkey; bit<64> add; bit<64> compare; }
header immdt_h { bit<32> imm; }
/* Little-endian fields as separate bytes: each is one byte move, all in one action (a
 * concatenation of slices into one wide field took a stage per piece). */
header kw_payload_h { bit<8> ck0; bit<8> ck1; bit<8> ck2; bit<8> ck3; bit<32> value; }
header icrc_h { bit<8> c0; bit<8> c1; bit<8> c2; bit<8> c3; }

/* The hash profiles' CRC-32: reflected, init and final XOR all ones (proto::crc). */
#define CRC32_CUSTOM(poly) CRCPolynomial<bit<32>>(poly, true, false, false, CRC_INIT, CRC_XOROUT)

/* Frame skeleton shared by every request: IPv4/UDP/BTH as FrameTemplate writes them (MigReq 1,
 * P_Key 0xFFFF, IPv4 ident 0, DF, TTL 64, UDP checksum 0); the caller sets the addresses, the
 * UDP source port, the destination QP, AckReq and the PSN. `transport_len` counts BTH to ICRC. */
#define DTA_ROCE_FRAME_ACTION \
    action frame(bit<8> opcode, bit<16> transport_len) { \
        hdr.ipv4.version = 4; hdr.ipv4.ihl = 5; hdr.ipv4.tos = 0; \
        hdr.ipv4.total_len = transport_len + (IPV4_HEADER_LEN + UDP_HEADER_LEN); \
        hdr.ipv4.ident = 0; hdr.ipv4.flags = 2; hdr.ipv4.frag_offset = 0; hdr.ipv4.ttl = 64; \
        hdr.ipv4.protocol = IP_PROTO_UDP; \
        hdr.udp.dst_port = ROCEV2_PORT; \
        hdr.udp.len = transport_len + UDP_HEADER_LEN; \
        hdr.udp.checksum = 0; \
        hdr.bth.setValid(); \
        hdr.bth.opcode = opcode; hdr.bth.se = 0; hdr.bth.mig_req = 1; hdr.bth.pad = 0; \
        hdr.bth.tver = 0; hdr.bth.pkey = IB_PKEY_DEFAULT; hdr.bth.fecn = 0; hdr.bth.becn = 0; \
        hdr.bth.resv6 = 0; hdr.bth.resv7 = 0; \
        hdr.icrc.setValid(); \
    }

/* The ICRC (p4/README.md, "ICRC"): a reflected CRC-32 seeded with the 8 x 0xFF prefix, over
 * the masked IPv4, UDP and BTH fields and everything up to the ICRC. */
#define ICRC_ENGINE(NAME) Hash<bit<32>>(HashAlgorithm_t.CUSTOM, \
        CRCPolynomial<bit<32>>(ICRC_POLY, true, false, false, ICRC_SEED_NORMAL, ICRC_XOROUT)) NAME
#define ICRC_HEADERS \
        hdr.ipv4.version, hdr.ipv4.ihl, ICRC_MASK8, hdr.ipv4.total_len, hdr.ipv4.ident, \
        hdr.ipv4.flags, hdr.ipv4.frag_offset, ICRC_MASK8, hdr.ipv4.protocol, ICRC_MASK16, \
        hdr.ipv4.src, hdr.ipv4.dst, \
        hdr.udp.src_port, hdr.udp.dst_port, hdr.udp.len, ICRC_MASK16, \
        hdr.bth.opcode, hdr.bth.se, hdr.bth.mig_req, hdr.bth.pad, hdr.bth.tver, hdr.bth.pkey, \
        ICRC_MASK8, hdr.bth.dest_qp, hdr.bth.ack_req, hdr.bth.resv7, hdr.bth.psn
#define RETH_ICRC hdr.reth.va_hi, hdr.reth.va_lo, hdr.reth.rkey, hdr.reth.dma_len
#define KW_ICRC hdr.kw_payload.ck0, hdr.kw_payload.ck1, hdr.kw_payload.ck2, hdr.kw_payload.ck3, \
        hdr.kw_payload.value

#endif
