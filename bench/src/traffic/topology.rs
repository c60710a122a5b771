//! The network a capture's traffic is laid over: switches, links, where hosts attach, and the
//! path a flow takes, hop by hop, as the switches would route it.
//!
//! Routing is shortest-path with per-hop ECMP, as data-centre switches do: at each switch the
//! next hop is one of the neighbours one step closer to the destination's switch, chosen by a
//! hash of the flow's 5-tuple salted with the switch's ID (so one flow always takes one path,
//! different flows spread over the equal-cost ones, and two switches do not make correlated
//! choices). A host attaches to the switch its longest matching `host` prefix names, or
//! otherwise to one of the edge switches chosen by a hash of its address.
//!
//! # `fat-tree:k=K`
//! The k-ary fat tree of `dta gen` (`workload::FatTree`): k pods of k/2 ToR (edge) and k/2
//! aggregation switches, (k/2)² cores; switch index `pod·k + i` is ToR i of the pod,
//! `pod·k + k/2 + j` its aggregation switch j, `k² + c` core c; every ToR links to every
//! aggregation switch of its pod, aggregation switch j of each pod to cores `j·k/2 ..
//! (j+1)·k/2`. Switch IDs are the scenario's (`--id-base` + index, or `--switch-ids`). Paths
//! are 1 (same ToR), 3 (same pod) or 5 hops.
//!
//! # Topology files
//! One statement per line; `#` starts a comment; IDs are decimal, 1..=4294967294 (0 would
//! read as the padding of a path, 0xFFFFFFFF is the postcard blank marker).
//! ```text
//! switch 1 2 3 10-13          # switch IDs (single IDs and inclusive ranges)
//! link 1 10                   # a bidirectional link between two declared switches
//! link 2 10
//! edge 1 2 3                  # switches hosts attach to when no `host` prefix matches
//!                             # (default: every switch)
//! host 10.0.1.0/24 1          # hosts in this prefix attach to switch 1 (longest prefix wins)
//! host 2001:db8::/32 3
//! ```
//! The graph must be connected, and no shortest path between two switches hosts can attach to
//! may be longer than [`MAX_PATH`] switches.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use crate::gen::digest;
use crate::workload::mix;

/// Most switches on a path: a Key-Write value holds 28 bytes in the 32-byte slots of the
/// `paths` store, seven 4-byte switch IDs.
pub const MAX_PATH: usize = 7;

/// Switches a topology may have.
pub const MAX_SWITCHES: usize = 65_535;

/// A path: switch indices, first hop first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    hops: [u32; MAX_PATH],
    len: u8,
}

impl Path {
    /// The switch indices.
    pub fn hops(&self) -> &[u32] {
        &self.hops[..self.len as usize]
    }

    /// Number of switches.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Never: a path has at least its first switch.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[derive(Debug, Clone)]
struct HostRule {
    net: IpAddr,
    prefix: u8,
    switch: u32,
}

impl HostRule {
    fn matches(&self, a: &IpAddr) -> bool {
        fn masked(b: &[u8], bits: u8) -> impl Iterator<Item = u8> + '_ {
            b.iter().enumerate().map(move |(i, &x)| {
                let keep = (bits as usize).saturating_sub(i * 8).min(8);
                x & !(0xFFu8.checked_shr(keep as u32).unwrap_or(0))
            })
        }
        match (self.net, a) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                masked(&n.octets(), self.prefix).eq(masked(&a.octets(), self.prefix))
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                masked(&n.octets(), self.prefix).eq(masked(&a.octets(), self.prefix))
            }
            _ => false,
        }
    }
}

/// Switches, links and host attachment.
#[derive(Debug, Clone)]
pub struct Topology {
    /// What it is (`fat-tree:k=8`, or the file's path).
    pub name: String,
    ids: Vec<u32>,
    adj: Vec<Vec<u32>>,
    edges: Vec<u32>,
    hosts: Vec<HostRule>,
    /// Distances (in links) to each destination switch, filled as destinations appear.
    dist: HashMap<u32, Vec<u16>>,
    /// The fat tree's arity, for fat trees.
    pub fat_tree_k: Option<u32>,
}

impl Topology {
    /// The k-ary fat tree with switch `i` named `id(i)`.
    pub fn fat_tree(k: u32, id: impl Fn(u32) -> u32) -> Result<Topology, String> {
        if !(2..=64).contains(&k) || k % 2 != 0 {
            return Err(format!("fat-tree k must be even and 2..=64, not {k}"));
        }
        let h = k / 2;
        let n = (k * k + h * h) as usize;
        let mut adj = vec![Vec::new(); n];
        let mut link = |a: u32, b: u32| {
            adj[a as usize].push(b);
            adj[b as usize].push(a);
        };
        for pod in 0..k {
            for i in 0..h {
                for j in 0..h {
                    link(pod * k + i, pod * k + h + j);
                }
            }
            for j in 0..h {
                for m in 0..h {
                    link(pod * k + h + j, k * k + j * h + m);
                }
            }
        }
        let edges = (0..k)
            .flat_map(|p| (0..h).map(move |i| p * k + i))
            .collect();
        let ids: Vec<u32> = (0..n as u32).map(id).collect();
        Topology::build(
            format!("fat-tree:k={k}"),
            ids,
            adj,
            edges,
            Vec::new(),
            Some(k),
        )
    }

    /// Parses a topology file's text (`name` for messages).
    pub fn parse(name: &str, text: &str) -> Result<Topology, String> {
        let mut ids: Vec<u32> = Vec::new();
        let mut index: HashMap<u32, u32> = HashMap::new();
        let mut links: Vec<(u32, u32, usize)> = Vec::new();
        let mut edge_ids: Vec<(u32, usize)> = Vec::new();
        let mut host_lines: Vec<(IpAddr, u8, u32, usize)> = Vec::new();
        let id_of = |s: &str, ln: usize| -> Result<u32, String> {
            let v: u32 = s
                .parse()
                .map_err(|_| format!("{name}:{ln}: {s:?} is not a switch ID"))?;
            if v == 0 || v == u32::MAX {
                return Err(format!(
                    "{name}:{ln}: switch ID {v} is reserved (IDs are 1..=4294967294)"
                ));
            }
            Ok(v)
        };
        let ids_of = |words: &[&str], ln: usize| -> Result<Vec<u32>, String> {
            let mut v = Vec::new();
            for w in words {
                match w.split_once('-') {
                    Some((a, b)) => {
                        let (a, b) = (id_of(a, ln)?, id_of(b, ln)?);
                        if b < a || (b - a) as usize >= MAX_SWITCHES {
                            return Err(format!("{name}:{ln}: bad range {w}"));
                        }
                        v.extend(a..=b);
                    }
                    None => v.push(id_of(w, ln)?),
                }
            }
            Ok(v)
        };
        for (i, line) in text.lines().enumerate() {
            let ln = i + 1;
            let line = line.split('#').next().unwrap_or("").trim();
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some((&kw, args)) = words.split_first() else {
                continue;
            };
            match kw {
                "switch" => {
                    if args.is_empty() {
                        return Err(format!("{name}:{ln}: `switch` needs at least one ID"));
                    }
                    for id in ids_of(args, ln)? {
                        if index.insert(id, ids.len() as u32).is_some() {
                            return Err(format!("{name}:{ln}: switch {id} declared twice"));
                        }
                        ids.push(id);
                        if ids.len() > MAX_SWITCHES {
                            return Err(format!("{name}: more than {MAX_SWITCHES} switches"));
                        }
                    }
                }
                "link" => {
                    let [a, b] = args else {
                        return Err(format!("{name}:{ln}: `link A B` takes two switch IDs"));
                    };
                    let (a, b) = (id_of(a, ln)?, id_of(b, ln)?);
                    if a == b {
                        return Err(format!("{name}:{ln}: a link from switch {a} to itself"));
                    }
                    links.push((a, b, ln));
                }
                "edge" => {
                    if args.is_empty() {
                        return Err(format!("{name}:{ln}: `edge` needs at least one ID"));
                    }
                    edge_ids.extend(ids_of(args, ln)?.into_iter().map(|e| (e, ln)));
                }
                "host" => {
                    let [net, sw] = args else {
                        return Err(format!(
                            "{name}:{ln}: `host PREFIX/LEN SWITCH` takes a prefix and a switch ID"
                        ));
                    };
                    let (addr, len) = net.split_once('/').unwrap_or((net, ""));
                    let addr: IpAddr = addr
                        .parse()
                        .map_err(|_| format!("{name}:{ln}: {addr:?} is not an IP address"))?;
                    let max = if addr.is_ipv4() { 32 } else { 128 };
                    let len: u8 = if len.is_empty() {
                        max
                    } else {
                        len.parse()
                            .ok()
                            .filter(|&l| l <= max)
                            .ok_or_else(|| format!("{name}:{ln}: bad prefix length /{len}"))?
                    };
                    host_lines.push((addr, len, id_of(sw, ln)?, ln));
                }
                _ => {
                    return Err(format!(
                        "{name}:{ln}: unknown statement {kw:?} (switch, link, edge, host)"
                    ))
                }
            }
        }
        if ids.is_empty() {
            return Err(format!("{name}: no `switch` line"));
        }
        let find = |id: u32, ln: usize| {
            index
                .get(&id)
                .copied()
                .ok_or_else(|| format!("{name}:{ln}: switch {id} is not declared"))
        };
        let mut adj = vec![Vec::new(); ids.len()];
        for (a, b, ln) in links {
            let (a, b) = (find(a, ln)?, find(b, ln)?);
            if !adj[a as usize].contains(&b) {
                adj[a as usize].push(b);
                adj[b as usize].push(a);
            }
        }
        let mut edges = Vec::new();
        for (e, ln) in edge_ids {
            let e = find(e, ln)?;
            if !edges.contains(&e) {
                edges.push(e);
            }
        }
        if edges.is_empty() {
            edges = (0..ids.len() as u32).collect();
        }
        let mut hosts = Vec::new();
        for (net, prefix, sw, ln) in host_lines {
            hosts.push(HostRule {
                net,
                prefix,
                switch: find(sw, ln)?,
            });
        }
        // Longest prefix first; equal lengths keep the file's order.
        hosts.sort_by_key(|h| std::cmp::Reverse(h.prefix));
        Topology::build(name.to_string(), ids, adj, edges, hosts, None)
    }

    /// `fat-tree:k=K` (switch `i` named `id(i)`), or a topology file's path.
    pub fn from_arg(arg: &str, id: impl Fn(u32) -> u32) -> Result<Topology, String> {
        if let Some(k) = arg.strip_prefix("fat-tree:k=") {
            let k = k
                .parse()
                .map_err(|_| format!("--topology {arg}: k must be a number"))?;
            return Topology::fat_tree(k, id);
        }
        if arg.starts_with("fat-tree") {
            return Err(format!(
                "--topology {arg}: write fat-tree:k=K (K even, 2..=64)"
            ));
        }
        let text = std::fs::read_to_string(arg).map_err(|e| format!("--topology {arg}: {e}"))?;
        Topology::parse(arg, &text)
    }

    fn build(
        name: String,
        ids: Vec<u32>,
        mut adj: Vec<Vec<u32>>,
        edges: Vec<u32>,
        hosts: Vec<HostRule>,
        fat_tree_k: Option<u32>,
    ) -> Result<Topology, String> {
        for a in &mut adj {
            a.sort_unstable();
        }
        let t = Topology {
            name,
            ids,
            adj,
            edges,
            hosts,
            dist: HashMap::new(),
            fat_tree_k,
        };
        let d0 = t.bfs(0);
        if let Some(i) = d0.iter().position(|&d| d == u16::MAX) {
            return Err(format!(
                "{}: switch {} cannot be reached from switch {}",
                t.name, t.ids[i], t.ids[0]
            ));
        }
        if fat_tree_k.is_some() {
            // At most 5 switches by construction.
            return Ok(t);
        }
        // Every switch a host can attach to must reach every other within MAX_PATH switches.
        let mut attach: Vec<u32> = t.edges.clone();
        attach.extend(t.hosts.iter().map(|h| h.switch));
        attach.sort_unstable();
        attach.dedup();
        for &a in &attach {
            let d = t.bfs(a);
            for &b in &attach {
                if d[b as usize] as usize + 1 > MAX_PATH {
                    return Err(format!(
                        "{}: the shortest path from switch {} to switch {} crosses {} switches; \
                         a DTA path carries at most {MAX_PATH}",
                        t.name,
                        t.ids[a as usize],
                        t.ids[b as usize],
                        d[b as usize] + 1
                    ));
                }
            }
        }
        Ok(t)
    }

    fn bfs(&self, from: u32) -> Vec<u16> {
        let mut d = vec![u16::MAX; self.ids.len()];
        let mut q = VecDeque::new();
        d[from as usize] = 0;
        q.push_back(from);
        while let Some(v) = q.pop_front() {
            let dv = d[v as usize];
            for &u in &self.adj[v as usize] {
                if d[u as usize] == u16::MAX {
                    d[u as usize] = dv + 1;
                    q.push_back(u);
                }
            }
        }
        d
    }

    /// Number of switches.
    pub fn switches(&self) -> usize {
        self.ids.len()
    }

    /// Switch `i`'s ID.
    pub fn id(&self, i: u32) -> u32 {
        self.ids[i as usize]
    }

    /// Every switch ID, by index.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// True if switches `a` and `b` (indices) are linked.
    pub fn linked(&self, a: u32, b: u32) -> bool {
        self.adj
            .get(a as usize)
            .is_some_and(|n| n.binary_search(&b).is_ok())
    }

    /// Links on a shortest path from switch `a` to switch `b` (indices).
    pub fn distance(&mut self, a: u32, b: u32) -> u16 {
        self.dist_to(b)[a as usize]
    }

    /// Most switches on any path between two switches hosts attach to.
    pub fn max_path(&mut self) -> usize {
        if self.fat_tree_k.is_some() {
            return 5;
        }
        let mut attach: Vec<u32> = self.edges.clone();
        attach.extend(self.hosts.iter().map(|h| h.switch));
        attach.sort_unstable();
        attach.dedup();
        let mut m = 1;
        for &b in &attach {
            let d = self.bfs(b);
            for &a in &attach {
                m = m.max(d[a as usize] as usize + 1);
            }
        }
        m
    }

    /// The switch (index) host `a` attaches to.
    pub fn attach(&self, a: &IpAddr) -> u32 {
        if let Some(h) = self.hosts.iter().find(|h| h.matches(a)) {
            return h.switch;
        }
        let i = mix(addr_hash(a)) % self.edges.len() as u64;
        self.edges[i as usize]
    }

    fn dist_to(&mut self, dst: u32) -> &[u16] {
        if !self.dist.contains_key(&dst) {
            let d = self.bfs(dst);
            self.dist.insert(dst, d);
        }
        &self.dist[&dst]
    }

    /// The path of the flow with 13-byte key `key` from host `src` to host `dst`.
    pub fn path(&mut self, key: &[u8], src: &IpAddr, dst: &IpAddr) -> Path {
        let (s, t) = (self.attach(src), self.attach(dst));
        let flow = u64::from(digest(key));
        self.dist_to(t);
        let (d, adj) = (&self.dist[&t], &self.adj);
        let mut p = Path {
            hops: [0; MAX_PATH],
            len: 1,
        };
        p.hops[0] = s;
        let mut v = s;
        while v != t && (p.len as usize) < MAX_PATH {
            let dv = d[v as usize];
            let closer = |u: &&u32| d[**u as usize] + 1 == dv;
            let n = adj[v as usize].iter().filter(closer).count() as u64;
            // ECMP: the flow hash salted with this switch's ID.
            let pick = mix(flow ^ (self.ids[v as usize] as u64) << 17) % n.max(1);
            let Some(&u) = adj[v as usize].iter().filter(closer).nth(pick as usize) else {
                break;
            };
            p.hops[p.len as usize] = u;
            p.len += 1;
            v = u;
        }
        p
    }
}

fn addr_hash(a: &IpAddr) -> u64 {
    u64::from(match a {
        IpAddr::V4(v) => digest(&v.octets()),
        IpAddr::V6(v) => digest(&v.octets()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::FatTree;

    fn key(i: u32) -> [u8; 13] {
        let mut k = [0u8; 13];
        k[..4].copy_from_slice(&i.to_be_bytes());
        k[8] = 6;
        k
    }

    #[test]
    fn fat_tree_paths_are_valid_and_spread() {
        for k in [2u32, 4, 8] {
            let mut t = Topology::fat_tree(k, |i| 1 + i).unwrap();
            let ft = FatTree { k, id_base: 1 };
            assert_eq!(t.switches() as u32, ft.switches());
            let h = k / 2;
            let tor = |i: u32| i < k * k && i % k < h;
            let agg = |i: u32| i < k * k && i % k >= h;
            let mut cores = std::collections::HashSet::new();
            for i in 0..2000u32 {
                let (a, b): (IpAddr, IpAddr) = (
                    [10, 0, (i >> 8) as u8, i as u8].into(),
                    [10, 1, (i >> 3) as u8, (i * 7) as u8].into(),
                );
                let p = t.path(&key(i), &a, &b);
                let hops = p.hops().to_vec();
                assert_eq!(hops[0], t.attach(&a));
                assert_eq!(*hops.last().unwrap(), t.attach(&b));
                for w in hops.windows(2) {
                    assert!(t.linked(w[0], w[1]), "k={k}: {hops:?}");
                }
                // Shortest: 1 hop on one ToR, 3 within a pod, 5 across pods.
                let (s, d) = (hops[0], *hops.last().unwrap());
                let want = if s == d {
                    1
                } else if s / k == d / k {
                    3
                } else {
                    5
                };
                assert_eq!(hops.len(), want, "k={k}: {hops:?}");
                assert_eq!(t.distance(s, d) as usize + 1, want);
                assert!(tor(s) && tor(d));
                if want == 5 {
                    assert!(agg(hops[1]) && agg(hops[3]) && hops[2] >= k * k);
                    // ToR, Agg, Core, Agg, ToR: the core belongs to the aggs' group.
                    assert_eq!((hops[2] - k * k) / h, hops[1] % k - h);
                    assert_eq!((hops[2] - k * k) / h, hops[3] % k - h);
                    cores.insert(hops[2]);
                }
                // The same flow takes the same path.
                assert_eq!(t.path(&key(i), &a, &b), p);
            }
            if k > 2 {
                assert_eq!(cores.len() as u32, h * h, "k={k}: ECMP uses every core");
            }
        }
        assert!(Topology::fat_tree(3, |i| i).is_err());
        assert!(Topology::fat_tree(66, |i| i).is_err());
    }

    const FILE: &str = "\
# two leaves, two spines, a border switch
switch 1 2     # leaves
switch 10-11   # spines
switch 20
link 1 10
link 1 11
link 2 10
link 2 11
link 20 10
edge 1 2
host 192.0.2.0/24 20
host 192.0.2.128/25 1
host 2001:db8::/32 2
";

    #[test]
    fn file_topology_routes_and_attaches() {
        let mut t = Topology::parse("leafspine", FILE).unwrap();
        assert_eq!(t.switches(), 5);
        let id = |t: &Topology, p: &Path| p.hops().iter().map(|&h| t.id(h)).collect::<Vec<_>>();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.200".parse().unwrap();
        let c: IpAddr = "2001:db8::5".parse().unwrap();
        assert_eq!(t.id(t.attach(&a)), 20);
        assert_eq!(t.id(t.attach(&b)), 1, "the longer prefix wins");
        assert_eq!(t.id(t.attach(&c)), 2);
        // 20 -> 10 -> leaf 1: the only shortest path.
        let p = t.path(&key(1), &a, &b);
        assert_eq!(id(&t, &p), [20, 10, 1]);
        // Leaf 1 to leaf 2 over either spine, by flow.
        let mut spines = std::collections::HashSet::new();
        for i in 0..64 {
            let p = t.path(&key(i), &b, &"2001:db8::9".parse().unwrap());
            let v = id(&t, &p);
            assert_eq!((v[0], v[2], v.len()), (1, 2, 3));
            spines.insert(v[1]);
        }
        assert_eq!(spines.len(), 2);
        // Unmatched hosts land on the edge switches only.
        for i in 0..100u32 {
            let s = t.id(t.attach(&IpAddr::from([198, 51, 100, i as u8])));
            assert!(s == 1 || s == 2);
        }
        assert_eq!(t.max_path(), 3);
    }

    #[test]
    fn file_errors_name_the_line() {
        for (text, want) in [
            ("", "no `switch` line"),
            ("switch 1\nswitch 1", ":2: switch 1 declared twice"),
            ("switch 1 2\nlink 1 3", ":2: switch 3 is not declared"),
            ("switch 1\nlink 1 1", "to itself"),
            ("switch 0", "reserved"),
            ("switch 4294967295", "reserved"),
            ("switch 1\nrouter 2", "unknown statement \"router\""),
            ("switch 1\nhost 10.0.0.0/33 1", "bad prefix length"),
            ("switch 1\nhost ten 1", "not an IP address"),
            ("switch 1 2", "cannot be reached"),
            ("switch 1-8\nlink 1 2\nlink 2 3\nlink 3 4\nlink 4 5\nlink 5 6\nlink 6 7\nlink 7 8\nedge 1 8", "crosses 8 switches"),
        ] {
            let e = Topology::parse("t", text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // A long chain is fine when hosts attach only near its middle.
        let mut text = String::from("switch 1-9\n");
        for i in 1..9 {
            text.push_str(&format!("link {i} {}\n", i + 1));
        }
        text.push_str("edge 3 4 5\n");
        assert!(Topology::parse("chain", &text).is_ok());
        assert!(Topology::from_arg("fat-tree:k=x", |i| i).is_err());
        assert!(Topology::from_arg("fat-tree", |i| i).is_err());
        assert!(Topology::from_arg("/nonexistent/topology", |i| i).is_err());
    }
}
