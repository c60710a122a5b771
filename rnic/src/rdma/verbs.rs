//! Thin owning wrappers over the rdma-sys objects the backend and the test client use.
//!
//! Every type here owns one C object and releases it in `Drop`; the owners drop them in the
//! order the verbs API requires (QP before CQ before completion channel; MRs before PD; all of
//! them before the rdma_cm id whose device they live on).

use std::ffi::CStr;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::raw::c_void;
use std::ptr;

use rdma_sys::*;

/// The last OS error, for messages.
pub fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// Names of the RDMA devices libibverbs sees (empty: none).
pub fn device_names() -> Result<Vec<String>, String> {
    let mut n = 0i32;
    // SAFETY: n is a valid out-pointer; the list is freed below and not used after.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(format!("ibv_get_device_list failed: {}", errno()));
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds n valid device pointers; the name is a NUL-terminated string
        // owned by the device, copied before the list is freed.
        unsafe {
            let dev = *list.add(i);
            let name = ibv_get_device_name(dev);
            if !name.is_null() {
                names.push(CStr::from_ptr(name).to_string_lossy().into_owned());
            }
        }
    }
    // SAFETY: the list came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
    Ok(names)
}

/// The name of the device behind a verbs context.
pub fn context_name(ctx: *mut ibv_context) -> String {
    if ctx.is_null() {
        return "?".into();
    }
    // SAFETY: ctx is a live context owned by librdmacm; its device and name outlive it.
    unsafe {
        let name = ibv_get_device_name((*ctx).device);
        if name.is_null() {
            "?".into()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

/// An IPv4 socket address as the C API wants it.
pub fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

/// The IPv4 address of a `sockaddr`, if it is one.
///
/// # Safety
/// `sa` must point to a valid socket address of its family's size.
pub unsafe fn sockaddr_v4(sa: *const libc::sockaddr) -> Option<SocketAddrV4> {
    // SAFETY: per the contract; only read as sockaddr_in when the family says so.
    unsafe {
        if sa.is_null() || (*sa).sa_family != libc::AF_INET as libc::sa_family_t {
            return None;
        }
        let sin = &*(sa as *const libc::sockaddr_in);
        Some(SocketAddrV4::new(
            Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
            u16::from_be(sin.sin_port),
        ))
    }
}

/// The peer address of a connected or connecting rdma_cm id.
///
/// # Safety
/// `id` must be a live rdma_cm id.
pub unsafe fn peer_addr(id: *mut rdma_cm_id) -> Option<SocketAddrV4> {
    // SAFETY: per the contract; the route's destination address is inline in the id.
    unsafe { sockaddr_v4(rdma_get_peer_addr(&*id)) }
}

/// `ibv_wc_status_str`.
pub fn wc_status(status: u32) -> String {
    // SAFETY: ibv_wc_status_str returns a static string for any value.
    unsafe {
        let s = ibv_wc_status_str(status);
        if s.is_null() {
            format!("status {status}")
        } else {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        }
    }
}

/// `rdma_event_str`.
pub fn event_name(event: u32) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    unsafe {
        let s = rdma_event_str(event);
        if s.is_null() {
            format!("event {event}")
        } else {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        }
    }
}

/// Makes a file descriptor non-blocking.
pub fn set_nonblocking(fd: i32) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory is passed.
    let r = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 {
            fl
        } else {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
        }
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// An rdma_cm event channel.
pub struct EventChannel(pub *mut rdma_event_channel);

impl EventChannel {
    /// Opens one (needs `/dev/infiniband/rdma_cm`).
    pub fn new() -> io::Result<EventChannel> {
        // SAFETY: no arguments; null means failure with errno set.
        let c = unsafe { rdma_create_event_channel() };
        if c.is_null() {
            Err(errno())
        } else {
            Ok(EventChannel(c))
        }
    }

    /// Its file descriptor (readable when an event is queued).
    pub fn fd(&self) -> i32 {
        // SAFETY: the channel is live while self is.
        unsafe { (*self.0).fd }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every id on it is destroyed first by
        // the owners (fields drop in order, see the module docs).
        unsafe { rdma_destroy_event_channel(self.0) }
    }
}

/// An rdma_cm id (destroyed on drop, with its QP if it still has one).
pub struct CmId(pub *mut rdma_cm_id);

impl CmId {
    /// A new id on `channel` in the TCP port space; `context` is stored in the id.
    pub fn new(channel: &EventChannel, context: usize) -> io::Result<CmId> {
        let mut id = ptr::null_mut();
        // SAFETY: valid channel and out-pointer.
        let r = unsafe {
            rdma_create_id(
                channel.0,
                &mut id,
                context as *mut c_void,
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if r != 0 {
            Err(errno())
        } else {
            Ok(CmId(id))
        }
    }

    /// The device context the id is bound to (null while unbound or bound to any address).
    pub fn verbs(&self) -> *mut ibv_context {
        // SAFETY: the id is live while self is.
        unsafe { (*self.0).verbs }
    }

    /// The id's QP (null if none).
    pub fn qp(&self) -> *mut ibv_qp {
        // SAFETY: the id is live while self is.
        unsafe { (*self.0).qp }
    }

    /// The QPN of the id's QP (0 if none).
    pub fn qpn(&self) -> u32 {
        let qp = self.qp();
        if qp.is_null() {
            0
        } else {
            // SAFETY: a live QP owned by the id.
            unsafe { (*qp).qp_num }
        }
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: a live id we own; its QP (if any) goes first, and the CQ/PD it uses are still
        // alive because their owners drop after the id's QP (see Conn's field order).
        unsafe {
            if !(*self.0).qp.is_null() {
                rdma_destroy_qp(self.0);
            }
            rdma_destroy_id(self.0);
        }
    }
}

/// A protection domain.
pub struct Pd(pub *mut ibv_pd);

impl Pd {
    /// Allocates one on `ctx`.
    pub fn new(ctx: *mut ibv_context) -> io::Result<Pd> {
        // SAFETY: ctx is a live context (from a bound rdma_cm id).
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            Err(errno())
        } else {
            Ok(Pd(pd))
        }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; its MRs and QPs are gone (owners drop first).
        unsafe {
            ibv_dealloc_pd(self.0);
        }
    }
}

/// A registered memory region.
pub struct Mr(pub *mut ibv_mr);

/// Remote write, read and atomic access (plus local write, which remote write requires).
pub fn remote_access() -> i32 {
    (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
        | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
        | ibv_access_flags::IBV_ACCESS_REMOTE_READ
        | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC)
        .0 as i32
}

/// Access flags of a region peers may only READ (a ZERO agent's).
pub fn remote_read_only() -> i32 {
    ibv_access_flags::IBV_ACCESS_REMOTE_READ.0 as i32
}

impl Mr {
    /// Registers `len` bytes at `addr` in `pd`.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay mapped until the returned `Mr` is dropped.
    pub unsafe fn register(pd: &Pd, addr: *mut u8, len: usize, access: i32) -> io::Result<Mr> {
        // SAFETY: per the contract; pd is live.
        let mr = unsafe { ibv_reg_mr(pd.0, addr as *mut c_void, len, access) };
        if mr.is_null() {
            Err(errno())
        } else {
            Ok(Mr(mr))
        }
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.0).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr and deregistered once.
        unsafe {
            ibv_dereg_mr(self.0);
        }
    }
}

/// A completion channel.
pub struct CompChannel(pub *mut ibv_comp_channel);

impl CompChannel {
    /// Creates one on `ctx`, non-blocking.
    pub fn new(ctx: *mut ibv_context) -> io::Result<CompChannel> {
        // SAFETY: live context.
        let c = unsafe { ibv_create_comp_channel(ctx) };
        if c.is_null() {
            return Err(errno());
        }
        let c = CompChannel(c);
        set_nonblocking(c.fd())?;
        Ok(c)
    }

    /// Its file descriptor (readable when a CQ event is pending).
    pub fn fd(&self) -> i32 {
        // SAFETY: live channel.
        unsafe { (*self.0).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; its CQ is destroyed first.
        unsafe {
            ibv_destroy_comp_channel(self.0);
        }
    }
}

/// A completion queue.
pub struct Cq(pub *mut ibv_cq);

impl Cq {
    /// Creates one with `cqe` entries on `ctx`, reporting to `channel` if given.
    pub fn new(ctx: *mut ibv_context, cqe: i32, channel: Option<&CompChannel>) -> io::Result<Cq> {
        let ch = channel.map_or(ptr::null_mut(), |c| c.0);
        // SAFETY: live context and channel.
        let cq = unsafe { ibv_create_cq(ctx, cqe, ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            Err(errno())
        } else {
            Ok(Cq(cq))
        }
    }

    /// Asks for an event on the next completion.
    pub fn arm(&self) -> io::Result<()> {
        // SAFETY: live CQ.
        if unsafe { ibv_req_notify_cq(self.0, 0) } != 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }

    /// Polls up to `wc.len()` completions.
    pub fn poll(&self, wc: &mut [ibv_wc]) -> io::Result<usize> {
        // SAFETY: wc is valid for wc.len() entries.
        let n = unsafe { ibv_poll_cq(self.0, wc.len() as i32, wc.as_mut_ptr()) };
        if n < 0 {
            Err(io::Error::other(format!("ibv_poll_cq failed ({n})")))
        } else {
            Ok(n as usize)
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_cq; its QP is destroyed first, and every CQ event
        // taken from the channel has been acknowledged right away.
        unsafe {
            ibv_destroy_cq(self.0);
        }
    }
}

/// A zeroed work completion array.
pub fn wc_array<const N: usize>() -> [ibv_wc; N] {
    // SAFETY: ibv_wc is a plain C struct; all-zero is a valid value.
    std::array::from_fn(|_| unsafe { std::mem::zeroed() })
}

/// The immediate data of a completion (host order).
pub fn wc_imm(wc: &ibv_wc) -> u32 {
    // SAFETY: reading a u32 from a union of two u32 fields.
    u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })
}

/// Whether the completion carries immediate data.
pub fn wc_has_imm(wc: &ibv_wc) -> bool {
    wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0
}

/// One work request for [`post_send`].
pub enum SendOp {
    /// SEND of the local bytes.
    Send,
    /// RDMA WRITE of the local bytes to `(remote_addr, rkey)`.
    Write { remote_addr: u64, rkey: u32 },
    /// RDMA WRITE with Immediate.
    WriteImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    /// RDMA READ into the local bytes.
    Read { remote_addr: u64, rkey: u32 },
    /// FETCH_ADD; the original value lands in the 8 local bytes.
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
}

/// Posts one signalled work request using `local` (`addr`, `len`, `lkey`) as its buffer.
///
/// # Safety
/// `qp` must be a live QP, and `[addr, addr + len)` memory registered under `lkey` that stays
/// valid until the work request completes.
pub unsafe fn post_send(
    qp: *mut ibv_qp,
    wr_id: u64,
    op: SendOp,
    addr: u64,
    len: u32,
    lkey: u32,
) -> io::Result<()> {
    let mut sge = ibv_sge {
        addr,
        length: len,
        lkey,
    };
    // SAFETY: ibv_send_wr is a plain C struct; all-zero is valid (no next, no flags).
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
    match op {
        SendOp::Send => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
        SendOp::Write { remote_addr, rkey } => {
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            wr.wr.rdma = rdma_t { remote_addr, rkey };
        }
        SendOp::WriteImm {
            remote_addr,
            rkey,
            imm,
        } => {
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.wr.rdma = rdma_t { remote_addr, rkey };
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        SendOp::Read { remote_addr, rkey } => {
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
            wr.wr.rdma = rdma_t { remote_addr, rkey };
        }
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            wr.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.wr.atomic = atomic_t {
                remote_addr,
                compare_add: add,
                swap: 0,
                rkey,
            };
        }
    }
    let mut bad = ptr::null_mut();
    // SAFETY: per the contract; wr and sge live across the call (the provider copies them).
    let r = unsafe { ibv_post_send(qp, &mut wr, &mut bad) };
    if r != 0 {
        Err(io::Error::from_raw_os_error(r))
    } else {
        Ok(())
    }
}

/// Posts one receive WQE for `len` bytes at `addr`.
///
/// # Safety
/// As [`post_send`].
pub unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr_id: u64,
    addr: u64,
    len: u32,
    lkey: u32,
) -> io::Result<()> {
    let mut sge = ibv_sge {
        addr,
        length: len,
        lkey,
    };
    let mut wr = ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    // SAFETY: per the contract.
    let r = unsafe { ibv_post_recv(qp, &mut wr, &mut bad) };
    if r != 0 {
        Err(io::Error::from_raw_os_error(r))
    } else {
        Ok(())
    }
}

/// Limits of a device that the backend sizes its queues and `rdma_accept` parameters with.
#[derive(Debug, Clone, Copy)]
pub struct DeviceLimits {
    /// Largest QP depth.
    pub max_qp_wr: u32,
    /// Largest CQ.
    pub max_cqe: u32,
    /// Outstanding RDMA READ / atomic requests a QP can answer (responder resources).
    pub max_qp_rd_atom: u8,
    /// Outstanding RDMA READ / atomic requests a QP can issue (initiator depth).
    pub max_qp_init_rd_atom: u8,
}

/// The active path MTU of `port` in bytes (`ibv_query_port`): a READ's responses are cut at
/// it.
pub fn active_mtu(ctx: *mut ibv_context, port: u8) -> io::Result<u32> {
    // SAFETY: ibv_port_attr is a plain C struct; all-zero is valid.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, valid out-pointer of the size the call expects.
    let r = unsafe { ___ibv_query_port(ctx, port, &mut a) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5.
    let code = (a.active_mtu as u32).clamp(1, 5);
    Ok(128u32 << code)
}

/// `ibv_query_device`.
pub fn query_limits(ctx: *mut ibv_context) -> io::Result<DeviceLimits> {
    // SAFETY: ibv_device_attr is a plain C struct; all-zero is valid.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, valid out-pointer.
    let r = unsafe { ibv_query_device(ctx, &mut a) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    let clamp8 = |v: i32| v.clamp(0, 255) as u8;
    Ok(DeviceLimits {
        max_qp_wr: a.max_qp_wr.max(1) as u32,
        max_cqe: a.max_cqe.max(1) as u32,
        max_qp_rd_atom: clamp8(a.max_qp_rd_atom),
        max_qp_init_rd_atom: clamp8(a.max_qp_init_rd_atom),
    })
}
