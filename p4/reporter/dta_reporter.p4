/* dta_reporter.p4: an example DTA reporter for Tofino-1 (P4_16, TNA).
 *
 * Every switch runs this program. It forwards IPv4 normally and produces three kinds of DTA
 * reports, in the reference profile (default; variant A, or B with -DDTA_REF_VARIANT_B) or the
 * extended profile (-DDTA_REPORT_EXTENDED):
 *
 *   Key-Write   INT path report: transit hops push their switch ID onto an INT-lite stack
 *               (UDP destination port INT_PORT); the sink reports (flow -> path) with
 *               redundancy N. Extended: key = the 13-byte IPv4 5-tuple, value = the 5 hop IDs
 *               (20 B). Reference: key = IPv4 source, value = the last hop's switch ID.
 *   Append      a loss event when forwarding has no route: list from a table, value =
 *               (extended) 5-tuple + reason + switch ID (18 B), (reference) the switch ID.
 *   Postcard    one postcard per hop for flows the control plane marks: hop index and path
 *               length from a table (extended carries the path length; the reference profile
 *               has none and the translator waits for its fixed 5 hops).
 *
 * A report is an ingress-to-egress mirror copy: the mirror session (control plane) truncates
 * the copy to the original L2-L4 headers and sends it out of the port towards the translator;
 * egress replaces those headers with Ethernet/IPv4/UDP/DTA. One report per packet (priority:
 * path report, loss event, postcard).
 *
 * DART (-DDTA_DART, dta_dart.p4): the path report is not sent to the translator; the switch
 * writes it into a collector's Key-Write store itself, one RoCEv2 RDMA WRITE per redundancy
 * copy over its own QP, with the translator's hashes and frame bytes. Loss events and postcards
 * still go to the translator. Reference profile only. Knobs of the DART build:
 *   DTA_HASH_REFERENCE   the store's reference hash profile [independent]
 *   DTA_MAX_N            most copies per report, 1..8 [4]
 *   DTA_DART_QPS         collectors (QPs) per switch, 1..256 [16]
 *   DTA_NO_ICRC          ICRC 0 [computed in egress]
 *
 * Compile: bf-p4c --target tofino --arch tna --std p4-16 [-D...] dta_reporter.p4
 */

#include <core.p4>
#include <tna.p4>
#include "../include/dta_constants.p4"
#include "../include/dta_roce.p4"

#define INT_MAX_HOPS 5
const bit<16> INT_PORT = 0x1235;      /* UDP port of the INT-lite shim (example value) */

const bit<8> REPORT_NONE = 0;
const bit<8> REPORT_PATH = 1;
const bit<8> REPORT_LOSS = 2;
const bit<8> REPORT_POSTCARD = 3;
const MirrorType_t MIRROR_REPORT = 1;

/* Ethernet, IPv4, UDP (the report's) and the InfiniBand headers: dta_roce.p4. */
header l4_ports_h { bit<16> src_port; bit<16> dst_port; }
header udp_rest_h { bit<16> len; bit<16> checksum; }
/* INT-lite: a hop count and INT_MAX_HOPS switch IDs, right after the UDP header. */
header int_shim_h { bit<8> hops; bit<8> reserved; bit<16> orig_dst_port; }
header int_hop_h { bit<32> switch_id; }

/* Report headers (egress of the mirror copy). */
#ifdef DTA_REF_VARIANT_B
header dta_ref_h { bit<8> opcode; bit<8> seqnum; bit<8> flags; }
#define DTA_BASE_LEN DTA_REF_BASE_LEN_B
#else
header dta_ref_h { bit<8> opcode; bit<8> flags; }
#define DTA_BASE_LEN DTA_REF_BASE_LEN_A
#endif
header ref_kw_h { bit<8> n; bit<32> key; bit<32> data; }
header ref_ap_h { bit<32> list_id; bit<32> data; }
header ref_pc_h { bit<32> flow; bit<8> hop_num; bit<32> data; }
header dta_ext_h { bit<8> magic_version; bit<8> opcode; bit<8> flags; bit<8> reserved; bit<32> seq; }
header five_tuple_h { bit<32> src; bit<32> dst; bit<8> proto; bit<16> sport; bit<16> dport; }
header ext_kw_fixed_h { bit<8> n; bit<8> key_len; bit<8> val_len; bit<8> reserved; }
header ext_ap_fixed_h { bit<32> list_id; bit<8> val_len; bit<24> reserved; }
header loss_event_h { bit<8> reason; bit<32> switch_id; }
header ext_pc_fixed_h { bit<8> hop; bit<8> path_len; bit<8> key_len; bit<8> reserved; bit<32> value; }

/* Carried with the mirror copy. */
header mirror_h {
    bit<8> report;
    bit<8> n;
    bit<8> hop;
    bit<8> path_len;
    bit<32> list_id;
    bit<32> switch_id;
    bit<8> reason;
#ifdef DTA_DART
    bit<16> dart_qp;     /* the collector's QP (tbl_dart_collector) */
    bit<32> checksum;    /* the key's Key-Write checksum */
#endif
}

struct headers_t {
    mirror_h mirror;
    ethernet_h ethernet;
    ipv4_h ipv4;
    l4_ports_h ports;
    udp_rest_h udp_rest;
    int_shim_h int_shim;
    int_hop_h[INT_MAX_HOPS] int_hops;
    udp_h udp;
    dta_ref_h ref;
    ref_kw_h ref_kw;
    ref_ap_h ref_ap;
    ref_pc_h ref_pc;
    dta_ext_h ext;
    ext_kw_fixed_h ext_kw;
    ext_ap_fixed_h ext_ap;
    ext_pc_fixed_h ext_pc;
    five_tuple_h ftuple;
    loss_event_h loss;
#ifdef DTA_DART
    bth_h bth;
    reth_h reth;
    kw_payload_h kw_payload;
    icrc_h icrc;
#endif
}

struct ig_md_t {
    bit<8> report;
    bit<8> n;
    bit<8> hop;
    bit<8> path_len;
    bit<32> list_id;
    bit<32> switch_id;
    bit<8> reason;
    MirrorId_t session;
    bit<1> sink;
#ifdef DTA_DART
    bit<16> dart_qp;
    bit<32> checksum;
#endif
}

struct eg_md_t { bit<32> seq; }

#ifdef DTA_DART
#include "dta_dart.p4"
#endif

parser IgParser(packet_in pkt, out headers_t hdr, out ig_md_t md,
                out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        md.report = REPORT_NONE; md.n = 0; md.hop = 0; md.path_len = 0; md.list_id = 0;
        md.switch_id = 0; md.reason = 0; md.session = 0; md.sink = 0;
#ifdef DTA_DART
        md.dart_qp = 0; md.checksum = 0;
#endif
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) { ETHERTYPE_IPV4: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTO_UDP): parse_udp;
            (5, 0, 6): parse_ports;
            default: accept;
        }
    }
    state parse_ports { pkt.extract(hdr.ports); transition accept; }
    state parse_udp {
        pkt.extract(hdr.ports);
        pkt.extract(hdr.udp_rest);
        transition select(hdr.ports.dst_port) { INT_PORT: parse_int; default: accept; }
    }
    /* One state per stack entry, each entry extracted in exactly one state (a chain that
     * reached the same `.next` from several states wrote int_hops[0] in more than one state,
     * which bf-p4c rejects). Stacks deeper than INT_MAX_HOPS keep their first entries. */
    state parse_int {
        pkt.extract(hdr.int_shim);
        transition select(hdr.int_shim.hops) { 0: accept; default: parse_int_h0; }
    }
    state parse_int_h0 {
        pkt.extract(hdr.int_hops[0]);
        transition select(hdr.int_shim.hops) { 1: accept; default: parse_int_h1; }
    }
    state parse_int_h1 {
        pkt.extract(hdr.int_hops[1]);
        transition select(hdr.int_shim.hops) { 2: accept; default: parse_int_h2; }
    }
    state parse_int_h2 {
        pkt.extract(hdr.int_hops[2]);
        transition select(hdr.int_shim.hops) { 3: accept; default: parse_int_h3; }
    }
    state parse_int_h3 {
        pkt.extract(hdr.int_hops[3]);
        transition select(hdr.int_shim.hops) { 4: accept; default: parse_int_h4; }
    }
    state parse_int_h4 { pkt.extract(hdr.int_hops[4]); transition accept; }
}

control Ingress(inout headers_t hdr, inout ig_md_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* This switch: its ID, the mirror session towards the translator, the redundancy of path
     * reports and the Append list of loss events. */
    action set_switch(bit<32> switch_id, MirrorId_t session, bit<8> n, bit<32> loss_list) {
        md.switch_id = switch_id; md.session = session; md.n = n; md.list_id = loss_list;
    }
    table tbl_switch {
        actions = { set_switch; }
        default_action = set_switch(0, 0, 1, 0);
        size = 1;
    }

    action forward(PortId_t port, bit<1> sink) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        md.sink = sink;
    }
    action no_route(bit<8> reason) {
        md.reason = reason;
        ig_dprsr_md.drop_ctl = 1;
    }
    table tbl_forward {
        key = { hdr.ipv4.dst : exact; }
        actions = { forward; no_route; }
        default_action = no_route(1);
        size = 4096;
    }

    /* Flows to postcard, with this switch's 0-based hop index on their path and the path length
     * (0 = unknown). */
    action postcard(bit<8> hop, bit<8> path_len) { md.hop = hop; md.path_len = path_len; }
    table tbl_postcard {
        key = { hdr.ipv4.src : exact; hdr.ipv4.dst : exact; }
        actions = { postcard; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

#ifdef DTA_DART
    DartResponse() dart_response;
    DartCollector() dart_collector;
#endif

    apply {
        bool answer = false;   /* a collector's answer to our DART QPs: dropped */
#ifdef DTA_DART
        dart_response.apply(hdr, ig_dprsr_md, answer);
#endif
        if (hdr.ipv4.isValid() && !answer) {
            tbl_switch.apply();
            tbl_forward.apply();
            if (md.reason != 0) {
                md.report = REPORT_LOSS;
            } else {
                if (hdr.int_shim.isValid() && hdr.int_shim.hops < INT_MAX_HOPS) {
                    /* Transit: push our ID (the stack is re-emitted with one more hop). */
                    hdr.int_hops.push_front(1);
                    hdr.int_hops[0].setValid();
                    hdr.int_hops[0].switch_id = md.switch_id;
                    hdr.int_shim.hops = hdr.int_shim.hops + 1;
                    hdr.ipv4.total_len = hdr.ipv4.total_len + 4;
                    hdr.udp_rest.len = hdr.udp_rest.len + 4;
                }
                if (md.sink == 1 && hdr.int_shim.isValid()) {
                    md.report = REPORT_PATH;
#ifdef DTA_DART
                    /* Not to the translator: to the key's collector (dta_dart.p4). */
                    dart_collector.apply(hdr, md);
#endif
                } else if (tbl_postcard.apply().hit) {
                    md.report = REPORT_POSTCARD;
                }
            }
            if (md.report != REPORT_NONE && md.session != 0) {
                ig_dprsr_md.mirror_type = MIRROR_REPORT;
            }
        }
    }
}

control IgDeparser(packet_out pkt, inout headers_t hdr, in ig_md_t md,
                   in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    /* The session-type form `Mirror(MIRROR_REPORT)` makes bf-p4c (p4c 34b86e9) report
     * "Inconsistent mirror selectors"; the plain form with the explicit mirror_type test below
     * compiles. */
    Mirror() mirror;
    Checksum() ipv4_csum;
    apply {
        hdr.ipv4.checksum = ipv4_csum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.tos, hdr.ipv4.total_len, hdr.ipv4.ident,
            hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.src, hdr.ipv4.dst });
        if (ig_dprsr_md.mirror_type == MIRROR_REPORT) {
            mirror.emit<mirror_h>(md.session, { md.report, md.n, md.hop, md.path_len, md.list_id,
                                                md.switch_id, md.reason
#ifdef DTA_DART
                                                , md.dart_qp, md.checksum
#endif
                                                });
        }
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ports);
        pkt.emit(hdr.udp_rest);
        pkt.emit(hdr.int_shim);
        pkt.emit(hdr.int_hops);
    }
}

parser EgParser(packet_in pkt, out headers_t hdr, out eg_md_t md,
                out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        md.seq = 0;
        /* Mirror copies start with mirror_h (its first byte is a report kind, never 0); normal
         * packets carry no bridged header, so the first byte is the Ethernet destination. The
         * control plane never assigns MACs starting with 0x01..0x03 to translator-facing ports. */
        transition select(pkt.lookahead<bit<8>>()) {
            REPORT_PATH: parse_mirror;
            REPORT_LOSS: parse_mirror;
            REPORT_POSTCARD: parse_mirror;
            default: accept;
        }
    }
    state parse_mirror {
        pkt.extract(hdr.mirror);
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) { IP_PROTO_UDP: parse_udp; 6: parse_ports; default: accept; }
    }
    state parse_ports { pkt.extract(hdr.ports); transition accept; }
    state parse_udp {
        pkt.extract(hdr.ports);
        pkt.extract(hdr.udp_rest);
        transition select(hdr.ports.dst_port) { INT_PORT: parse_int; default: accept; }
    }
    /* One state per stack entry, each entry extracted in exactly one state (a chain that
     * reached the same `.next` from several states wrote int_hops[0] in more than one state,
     * which bf-p4c rejects). Stacks deeper than INT_MAX_HOPS keep their first entries. */
    state parse_int {
        pkt.extract(hdr.int_shim);
        transition select(hdr.int_shim.hops) { 0: accept; default: parse_int_h0; }
    }
    state parse_int_h0 {
        pkt.extract(hdr.int_hops[0]);
        transition select(hdr.int_shim.hops) { 1: accept; default: parse_int_h1; }
    }
    state parse_int_h1 {
        pkt.extract(hdr.int_hops[1]);
        transition select(hdr.int_shim.hops) { 2: accept; default: parse_int_h2; }
    }
    state parse_int_h2 {
        pkt.extract(hdr.int_hops[2]);
        transition select(hdr.int_shim.hops) { 3: accept; default: parse_int_h3; }
    }
    state parse_int_h3 {
        pkt.extract(hdr.int_hops[3]);
        transition select(hdr.int_shim.hops) { 4: accept; default: parse_int_h4; }
    }
    state parse_int_h4 { pkt.extract(hdr.int_hops[4]); transition accept; }
}

control Egress(inout headers_t hdr, inout eg_md_t md,
               in egress_intrinsic_metadata_t eg_intr_md,
               in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
               inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
               inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {

    /* Where reports go: our MAC/IP, the translator's MAC/IP. */
    action set_report_dst(bit<48> src_mac, bit<48> dst_mac, bit<32> src_ip, bit<32> dst_ip) {
        hdr.ethernet.src = src_mac; hdr.ethernet.dst = dst_mac;
        hdr.ipv4.src = src_ip; hdr.ipv4.dst = dst_ip;
    }
    table tbl_report_dst {
        actions = { set_report_dst; }
        default_action = set_report_dst(0, 0, 0, 0);
        size = 1;
    }

    /* Sequence numbers (extended `seq`, reference variant-B `seqnum`). */
    Register<bit<32>, bit<1>>(1, 0) seq_reg;
    RegisterAction<bit<32>, bit<1>, bit<32>>(seq_reg) seq_next = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; value = value + 1; }
    };

    action ip_udp(bit<16> dta_len) {
        hdr.ipv4.tos = 0; hdr.ipv4.ident = 0; hdr.ipv4.flags = 2; hdr.ipv4.frag_offset = 0;
        hdr.ipv4.ttl = 64; hdr.ipv4.protocol = IP_PROTO_UDP;
        hdr.ipv4.total_len = dta_len + (IPV4_HEADER_LEN + UDP_HEADER_LEN);
        hdr.udp.setValid();
        hdr.udp.src_port = 0xC0DE;
        hdr.udp.dst_port = DTA_PORT;
        hdr.udp.len = dta_len + UDP_HEADER_LEN;
        hdr.udp.checksum = 0;
    }

#ifdef DTA_DART
    DartWrite() dart_write;
#endif

    apply {
        bool dart = false;   /* a DART path report: the WRITE replaces the DTA report */
#ifdef DTA_DART
        if (hdr.mirror.isValid() && hdr.mirror.report == REPORT_PATH) {
            dart_write.apply(hdr, eg_intr_md, eg_dprsr_md);
            dart = true;
        }
#endif
        if (hdr.mirror.isValid() && !dart) {
            tbl_report_dst.apply();
            md.seq = seq_next.execute(0);
            bit<8> report = hdr.mirror.report;
#ifdef DTA_REPORT_EXTENDED
            hdr.ext.setValid();
            hdr.ext.magic_version = DTA_EXT_MAGIC_VERSION;
            hdr.ext.flags = 0x10;   /* medium priority */
            hdr.ext.reserved = 0;
            hdr.ext.seq = md.seq;
            hdr.ftuple.setValid();
            hdr.ftuple.src = hdr.ipv4.src; hdr.ftuple.dst = hdr.ipv4.dst;
            hdr.ftuple.proto = hdr.ipv4.protocol;
            hdr.ftuple.sport = hdr.ports.src_port; hdr.ftuple.dport = hdr.ports.dst_port;
            if (report == REPORT_PATH) {
                /* key 13 B, value = 5 hop IDs, newest hop first (unused hops 0). */
                hdr.ext.opcode = DTA_OP_KEY_WRITE;
                hdr.ext_kw.setValid();
                hdr.ext_kw.n = hdr.mirror.n; hdr.ext_kw.key_len = 13;
                hdr.ext_kw.val_len = 4 * INT_MAX_HOPS; hdr.ext_kw.reserved = 0;
                /* Hops the packet did not cross are reported as switch ID 0. */
                if (!hdr.int_hops[0].isValid()) { hdr.int_hops[0].setValid(); hdr.int_hops[0].switch_id = 0; }
                if (!hdr.int_hops[1].isValid()) { hdr.int_hops[1].setValid(); hdr.int_hops[1].switch_id = 0; }
                if (!hdr.int_hops[2].isValid()) { hdr.int_hops[2].setValid(); hdr.int_hops[2].switch_id = 0; }
                if (!hdr.int_hops[3].isValid()) { hdr.int_hops[3].setValid(); hdr.int_hops[3].switch_id = 0; }
                if (!hdr.int_hops[4].isValid()) { hdr.int_hops[4].setValid(); hdr.int_hops[4].switch_id = 0; }
                ip_udp(DTA_EXT_BASE_LEN + DTA_EXT_KW_FIXED + 13 + 4 * INT_MAX_HOPS);
            } else if (report == REPORT_LOSS) {
                hdr.ext.opcode = DTA_OP_APPEND;
                hdr.ext_ap.setValid();
                hdr.ext_ap.list_id = hdr.mirror.list_id; hdr.ext_ap.val_len = 18;
                hdr.ext_ap.reserved = 0;
                hdr.loss.setValid();
                hdr.loss.reason = hdr.mirror.reason; hdr.loss.switch_id = hdr.mirror.switch_id;
                hdr.int_hops[0].setInvalid(); hdr.int_hops[1].setInvalid(); hdr.int_hops[2].setInvalid();
                hdr.int_hops[3].setInvalid(); hdr.int_hops[4].setInvalid();
                ip_udp(DTA_EXT_BASE_LEN + DTA_EXT_AP_FIXED + 18);
            } else {
                hdr.ext.opcode = DTA_OP_POSTCARD;
                hdr.ext_pc.setValid();
                hdr.ext_pc.hop = hdr.mirror.hop; hdr.ext_pc.path_len = hdr.mirror.path_len;
                hdr.ext_pc.key_len = 13; hdr.ext_pc.reserved = 0;
                hdr.ext_pc.value = hdr.mirror.switch_id;
                hdr.int_hops[0].setInvalid(); hdr.int_hops[1].setInvalid(); hdr.int_hops[2].setInvalid();
                hdr.int_hops[3].setInvalid(); hdr.int_hops[4].setInvalid();
                ip_udp(DTA_EXT_BASE_LEN + DTA_EXT_PC_FIXED + 13);
            }
#else
            hdr.ref.setValid();
            hdr.ref.flags = 0;
#ifdef DTA_REF_VARIANT_B
            hdr.ref.seqnum = md.seq[7:0];
#endif
            if (report == REPORT_PATH) {
                hdr.ref.opcode = DTA_OP_KEY_WRITE;
                hdr.ref_kw.setValid();
                hdr.ref_kw.n = hdr.mirror.n; hdr.ref_kw.key = hdr.ipv4.src;
                hdr.ref_kw.data = hdr.mirror.switch_id;
                ip_udp(DTA_BASE_LEN + DTA_REF_KW_LEN);
            } else if (report == REPORT_LOSS) {
                hdr.ref.opcode = DTA_OP_APPEND;
                hdr.ref_ap.setValid();
                hdr.ref_ap.list_id = hdr.mirror.list_id; hdr.ref_ap.data = hdr.mirror.switch_id;
                ip_udp(DTA_BASE_LEN + DTA_REF_AP_LEN);
            } else {
                hdr.ref.opcode = DTA_OP_POSTCARD;
                hdr.ref_pc.setValid();
                hdr.ref_pc.flow = hdr.ipv4.src; hdr.ref_pc.hop_num = hdr.mirror.hop + 1;
                hdr.ref_pc.data = hdr.mirror.switch_id;
                ip_udp(DTA_BASE_LEN + DTA_REF_PC_LEN);
            }
            hdr.int_hops[0].setInvalid(); hdr.int_hops[1].setInvalid(); hdr.int_hops[2].setInvalid();
            hdr.int_hops[3].setInvalid(); hdr.int_hops[4].setInvalid();
#endif
            /* The copy's original transport headers are replaced by the report. */
            hdr.ports.setInvalid(); hdr.udp_rest.setInvalid(); hdr.int_shim.setInvalid();
            hdr.mirror.setInvalid();
        }
    }
}

control EgDeparser(packet_out pkt, inout headers_t hdr, in eg_md_t md,
                   in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_csum;
    apply {
        hdr.ipv4.checksum = ipv4_csum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.tos, hdr.ipv4.total_len, hdr.ipv4.ident,
            hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.src, hdr.ipv4.dst });
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ports);
        pkt.emit(hdr.udp_rest);
        pkt.emit(hdr.int_shim);
        pkt.emit(hdr.udp);
#ifdef DTA_DART
        pkt.emit(hdr.bth);
        pkt.emit(hdr.reth);
        pkt.emit(hdr.kw_payload);
        pkt.emit(hdr.icrc);
#endif
        pkt.emit(hdr.ref);
        pkt.emit(hdr.ref_kw);
        pkt.emit(hdr.ref_ap);
        pkt.emit(hdr.ref_pc);
        pkt.emit(hdr.ext);
        pkt.emit(hdr.ext_kw);
        pkt.emit(hdr.ext_ap);
        pkt.emit(hdr.ext_pc);
        pkt.emit(hdr.ftuple);
        pkt.emit(hdr.int_hops);
        pkt.emit(hdr.loss);
    }
}

Pipeline(IgParser(), Ingress(), IgDeparser(), EgParser(), Egress(), EgDeparser()) pipe;
Switch(pipe) main;
