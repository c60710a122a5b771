//! Protocol constants: ports and opcodes every component agrees on (and `p4/` is generated from).

/// UDP destination port of DTA reports (reference: `DTA_PORT_NUMBER`).
pub const DTA_PORT: u16 = 40040;
/// UDP destination port of DTA NACKs sent back to reporters (reference: `DTA_ACK_PORT_NUMBER`).
pub const DTA_NACK_PORT: u16 = 40044;
/// IANA port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;

/// DTA primitive opcodes, shared by both report profiles.
pub mod opcode {
    /// Key-Write.
    pub const KEY_WRITE: u8 = 0x01;
    /// Append.
    pub const APPEND: u8 = 0x02;
    /// Key-Increment.
    pub const KEY_INCREMENT: u8 = 0x03;
    /// Postcarding.
    pub const POSTCARD: u8 = 0x04;
    /// Sketch-Merge (extended profile version 2 only; `wire::sketch`).
    pub const SKETCH_MERGE: u8 = 0x05;
}
