//! A minimal Redis client: RESP2 commands (arrays of bulk strings) and replies, pipelined over
//! one TCP connection.
//!
//! The encoder and the reply parser follow the RESP specification
//! (<https://redis.io/docs/reference/protocol-spec/>): a command is `*<n>\r\n` then each argument
//! as `$<len>\r\n<bytes>\r\n`; a reply is a simple string (`+`), an error (`-`), an integer
//! (`:`), a bulk string (`$`, `$-1` for nil) or an array (`*`, `*-1` for nil) whose elements
//! follow it. The parser borrows from the connection's buffer, so reading a pipeline's replies
//! allocates nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// One reply, borrowed from the receive buffer. An array reply is only its header: its
/// elements are the next `n` replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+OK`.
    Simple(&'a [u8]),
    /// `-ERR ...`.
    Error(&'a [u8]),
    /// `:1000`.
    Integer(i64),
    /// `$5 hello` (`None`: the nil bulk string `$-1`).
    Bulk(Option<&'a [u8]>),
    /// `*2` (`None`: the nil array `*-1`): that many replies follow.
    Array(Option<usize>),
}

/// A reply that is not RESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolError;

/// Longest bulk string accepted (Redis's own default `proto-max-bulk-len`).
const MAX_BULK: usize = 512 << 20;

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

fn int(b: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ProtocolError)
}

/// Parses one reply at the start of `buf`: `Ok(None)` if `buf` does not hold all of it yet,
/// else the reply and the bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ProtocolError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some((head, used)) = line(&buf[1..]) else {
        return Ok(None);
    };
    let used = used + 1;
    let r = match kind {
        b'+' => Reply::Simple(head),
        b'-' => Reply::Error(head),
        b':' => Reply::Integer(int(head)?),
        b'*' => match int(head)? {
            -1 => Reply::Array(None),
            n if n >= 0 => Reply::Array(Some(n as usize)),
            _ => return Err(ProtocolError),
        },
        b'$' => {
            let n = int(head)?;
            if n == -1 {
                return Ok(Some((Reply::Bulk(None), used)));
            }
            if n < 0 || n as usize > MAX_BULK {
                return Err(ProtocolError);
            }
            let n = n as usize;
            if buf.len() < used + n + 2 {
                return Ok(None);
            }
            if &buf[used + n..used + n + 2] != b"\r\n" {
                return Err(ProtocolError);
            }
            return Ok(Some((
                Reply::Bulk(Some(&buf[used..used + n])),
                used + n + 2,
            )));
        }
        _ => return Err(ProtocolError),
    };
    Ok(Some((r, used)))
}

/// Appends one command (`args[0]` is its name) to `out`.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    push_len(out, b'*', args.len());
    for a in args {
        push_len(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_len(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    let mut d = [0u8; 20];
    let mut i = d.len();
    let mut v = n;
    loop {
        i -= 1;
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&d[i..]);
    out.extend_from_slice(b"\r\n");
}

/// Appends the decimal digits of `v` to `out` (an `INCRBY` increment) without allocating.
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    let mut v = v;
    loop {
        i -= 1;
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&d[i..]);
}

/// One connection to a Redis server.
pub struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Connection {
    /// Connects to `addr` (`host:port`).
    pub fn connect(addr: &str, timeout: Duration) -> Result<Connection, String> {
        let sa: SocketAddr = addr
            .to_socket_addrs()
            .map_err(|e| format!("Redis at {addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("Redis at {addr}: no address"))?;
        let stream = TcpStream::connect_timeout(&sa, timeout)
            .map_err(|e| format!("Redis at {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        Ok(Connection {
            stream,
            buf: vec![0; 1 << 16],
            start: 0,
            end: 0,
        })
    }

    /// Sends encoded commands.
    pub fn send(&mut self, commands: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(commands)
            .map_err(|e| format!("Redis: {e}"))
    }

    /// Reads the next reply and hands it to `f`.
    pub fn read_reply<R>(&mut self, f: impl FnOnce(Reply<'_>) -> R) -> Result<R, String> {
        loop {
            match parse(&self.buf[self.start..self.end]) {
                Err(_) => return Err("Redis: a reply that is not RESP".into()),
                Ok(Some((r, used))) => {
                    self.start += used;
                    return Ok(f(r));
                }
                Ok(None) => {}
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> Result<(), String> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A bulk reply larger than the buffer (INFO, a long list): grow.
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
        let n = self
            .stream
            .read(&mut self.buf[self.end..])
            .map_err(|e| format!("Redis: {e}"))?;
        if n == 0 {
            return Err("Redis closed the connection".into());
        }
        self.end += n;
        Ok(())
    }

    /// Sends one command and returns its reply, owned: simple strings and bulk strings as
    /// their bytes, integers as their decimal text, errors as `Err`.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Option<Vec<u8>>, String> {
        let mut c = Vec::new();
        encode(&mut c, args);
        self.send(&c)?;
        self.read_reply(|r| match r {
            Reply::Simple(s) => Ok(Some(s.to_vec())),
            Reply::Bulk(b) => Ok(b.map(<[u8]>::to_vec)),
            Reply::Integer(i) => Ok(Some(i.to_string().into_bytes())),
            Reply::Error(e) => Err(format!("Redis: {}", String::from_utf8_lossy(e))),
            Reply::Array(_) => Err("Redis: an array reply where none was expected".into()),
        })?
    }

    /// `call` for a command whose reply is an integer.
    pub fn call_int(&mut self, args: &[&[u8]]) -> Result<i64, String> {
        let r = self
            .call(args)?
            .ok_or("Redis: nil where an integer was expected")?;
        int(&r).map_err(|_| "Redis: not an integer".to_string())
    }
}

/// The value of `field` in an `INFO` reply (`field:value` lines).
pub fn info_field(info: &[u8], field: &str) -> Option<u64> {
    std::str::from_utf8(info).ok()?.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of the RESP specification, byte for byte.
    #[test]
    fn the_specs_examples_parse() {
        let one = |b: &'static [u8]| parse(b).unwrap().unwrap();
        assert_eq!(one(b"+OK\r\n"), (Reply::Simple(b"OK"), 5));
        assert_eq!(
            one(b"-Error message\r\n"),
            (Reply::Error(b"Error message"), 16)
        );
        assert_eq!(
            one(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n").0,
            Reply::Error(b"WRONGTYPE Operation against a key holding the wrong kind of value")
        );
        assert_eq!(one(b":0\r\n"), (Reply::Integer(0), 4));
        assert_eq!(one(b":1000\r\n"), (Reply::Integer(1000), 7));
        assert_eq!(one(b":-5\r\n").0, Reply::Integer(-5));
        assert_eq!(one(b"$5\r\nhello\r\n"), (Reply::Bulk(Some(b"hello")), 11));
        assert_eq!(one(b"$0\r\n\r\n"), (Reply::Bulk(Some(b"")), 6));
        assert_eq!(one(b"$-1\r\n"), (Reply::Bulk(None), 5));
        assert_eq!(one(b"*-1\r\n"), (Reply::Array(None), 5));
        assert_eq!(one(b"*0\r\n"), (Reply::Array(Some(0)), 4));
        // An array's elements are the replies after its header.
        let a = b"*2\r\n$5\r\nhello\r\n$5\r\nworld\r\n";
        let (h, n) = parse(a).unwrap().unwrap();
        assert_eq!(h, Reply::Array(Some(2)));
        let (e1, m) = parse(&a[n..]).unwrap().unwrap();
        assert_eq!(e1, Reply::Bulk(Some(b"hello")));
        assert_eq!(
            parse(&a[n + m..]).unwrap().unwrap().0,
            Reply::Bulk(Some(b"world"))
        );
        // Bulk strings are binary safe: CR LF inside is data.
        assert_eq!(
            one(b"$4\r\na\r\nb\r\n").0,
            Reply::Bulk(Some(b"a\r\nb".as_slice()))
        );
    }

    #[test]
    fn partial_and_broken_replies() {
        for cut in [
            &b""[..],
            b"+OK",
            b"+OK\r",
            b"$5\r\nhel",
            b"$5\r\nhello",
            b"$5\r\nhello\r",
        ] {
            assert_eq!(parse(cut), Ok(None), "{cut:?}");
        }
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$5\r\nhelloXY",
            b"$-2\r\n",
            b"*-3\r\n",
            b"$99999999999\r\n",
        ] {
            assert_eq!(parse(bad), Err(ProtocolError), "{bad:?}");
        }
    }

    /// The specification's example request: `LLEN mylist` is sent as an array of bulk strings.
    #[test]
    fn commands_encode_as_the_spec_shows() {
        let mut b = Vec::new();
        encode(&mut b, &[b"LLEN", b"mylist"]);
        assert_eq!(b, b"*2\r\n$4\r\nLLEN\r\n$6\r\nmylist\r\n");
        b.clear();
        encode(&mut b, &[b"SET", b"k\x00\r\n", b""]);
        assert_eq!(b, b"*3\r\n$3\r\nSET\r\n$4\r\nk\x00\r\n\r\n$0\r\n\r\n");
        b.clear();
        push_u64(&mut b, 0);
        b.push(b' ');
        push_u64(&mut b, u64::MAX);
        assert_eq!(b, b"0 18446744073709551615");
    }

    #[test]
    fn info_fields() {
        let info = b"# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1_048_576));
        assert_eq!(info_field(info, "used_memory_rss"), None);
    }
}
