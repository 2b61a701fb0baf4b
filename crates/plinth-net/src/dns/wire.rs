//! DNS messages on the wire (RFC 1035, with EDNS's OPT record of RFC 6891): the query a
//! resolver sends, and the answer written back, names compressed, truncated (`TC`) when it
//! does not fit the size the client takes.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Record types.
pub mod kind {
    /// An IPv4 address.
    pub const A: u16 = 1;
    /// A name server.
    pub const NS: u16 = 2;
    /// An alias.
    pub const CNAME: u16 = 5;
    /// The start of a zone.
    pub const SOA: u16 = 6;
    /// A reverse name.
    pub const PTR: u16 = 12;
    /// Text.
    pub const TXT: u16 = 16;
    /// An IPv6 address.
    pub const AAAA: u16 = 28;
    /// A service's port and host.
    pub const SRV: u16 = 33;
    /// EDNS options.
    pub const OPT: u16 = 41;
    /// Every type.
    pub const ANY: u16 = 255;
}

/// Response codes.
pub mod rcode {
    /// No error.
    pub const NOERROR: u8 = 0;
    /// The query could not be read.
    pub const FORMERR: u8 = 1;
    /// The server failed.
    pub const SERVFAIL: u8 = 2;
    /// No such name.
    pub const NXDOMAIN: u8 = 3;
    /// Not implemented (an opcode other than a query).
    pub const NOTIMP: u8 = 4;
    /// Refused.
    pub const REFUSED: u8 = 5;
}

/// A question: a name (lower case, without the final dot) and a type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    /// The name asked for.
    pub name: String,
    /// The record type.
    pub kind: u16,
    /// The class (1, IN).
    pub class: u16,
}

/// A query as read.
#[derive(Clone, Debug)]
pub struct Query {
    /// The client's ID.
    pub id: u16,
    /// Its opcode (0: a standard query).
    pub opcode: u8,
    /// Whether it asked for recursion.
    pub recursion_desired: bool,
    /// Its question (one).
    pub question: Question,
    /// The UDP payload size it takes (EDNS), if it said.
    pub udp_size: Option<u16>,
}

/// What a record holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    /// An IPv4 address.
    A(Ipv4Addr),
    /// An IPv6 address.
    Aaaa(Ipv6Addr),
    /// An alias's target.
    Cname(String),
    /// A reverse name's target.
    Ptr(String),
    /// A port and the host serving it.
    Srv {
        /// Priority.
        priority: u16,
        /// Weight.
        weight: u16,
        /// The port.
        port: u16,
        /// The host.
        target: String,
    },
    /// A zone's start.
    Soa {
        /// Its primary server.
        mname: String,
        /// Its mailbox.
        rname: String,
        /// The serial.
        serial: u32,
        /// How long before negative answers may be cached (the minimum).
        minimum: u32,
    },
    /// A name server.
    Ns(String),
}

impl Data {
    /// Its record type.
    pub fn kind(&self) -> u16 {
        match self {
            Data::A(_) => kind::A,
            Data::Aaaa(_) => kind::AAAA,
            Data::Cname(_) => kind::CNAME,
            Data::Ptr(_) => kind::PTR,
            Data::Srv { .. } => kind::SRV,
            Data::Soa { .. } => kind::SOA,
            Data::Ns(_) => kind::NS,
        }
    }
}

/// A resource record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its owner name (no final dot).
    pub name: String,
    /// Seconds it may be cached.
    pub ttl: u32,
    /// Its data.
    pub data: Data,
}

/// Why a message could not be read.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// Reads a name at `at`, following compression pointers; returns it and where it ends.
fn read_name(message: &[u8], mut at: usize) -> Result<(String, usize), Malformed> {
    let mut labels: Vec<String> = Vec::new();
    let mut end = None;
    let mut jumps = 0;
    loop {
        let length = *message.get(at).ok_or(Malformed)? as usize;
        if length & 0xc0 == 0xc0 {
            let low = *message.get(at + 1).ok_or(Malformed)? as usize;
            end.get_or_insert(at + 2);
            at = ((length & 0x3f) << 8) | low;
            jumps += 1;
            if jumps > 32 {
                return Err(Malformed);
            }
            continue;
        }
        if length & 0xc0 != 0 {
            return Err(Malformed);
        }
        if length == 0 {
            let end = end.unwrap_or(at + 1);
            let name = labels.join(".");
            if name.len() > 253 {
                return Err(Malformed);
            }
            return Ok((name, end));
        }
        let label = message.get(at + 1..at + 1 + length).ok_or(Malformed)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += 1 + length;
    }
}

fn u16_at(message: &[u8], at: usize) -> Result<u16, Malformed> {
    let bytes = message.get(at..at + 2).ok_or(Malformed)?;
    Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
}

/// Reads a query: its header, its one question, and an OPT record among the additional ones.
///
/// # Errors
/// A message too short, a response, or one without exactly one question.
pub fn parse_query(message: &[u8]) -> Result<Query, Malformed> {
    if message.len() < 12 {
        return Err(Malformed);
    }
    let id = u16_at(message, 0)?;
    let flags = u16_at(message, 2)?;
    if flags & 0x8000 != 0 {
        return Err(Malformed);
    }
    let questions = u16_at(message, 4)?;
    let answers = u16_at(message, 6)?;
    let authority = u16_at(message, 8)?;
    let additional = u16_at(message, 10)?;
    if questions != 1 {
        return Err(Malformed);
    }
    let (name, at) = read_name(message, 12)?;
    let kind = u16_at(message, at)?;
    let class = u16_at(message, at + 2)?;
    let mut at = at + 4;
    let mut udp_size = None;
    for index in 0..(u32::from(answers) + u32::from(authority) + u32::from(additional)) {
        let (_, after) = read_name(message, at)?;
        let record_kind = u16_at(message, after)?;
        let record_class = u16_at(message, after + 2)?;
        let length = usize::from(u16_at(message, after + 8)?);
        if record_kind == kind::OPT && index >= u32::from(answers) + u32::from(authority) {
            udp_size = Some(record_class.max(512));
        }
        at = after + 10 + length;
        if at > message.len() {
            return Err(Malformed);
        }
    }
    Ok(Query {
        id,
        opcode: ((flags >> 11) & 0xf) as u8,
        recursion_desired: flags & 0x0100 != 0,
        question: Question { name, kind, class },
        udp_size,
    })
}

/// Writes messages, compressing names against those already written.
struct Writer {
    out: Vec<u8>,
    names: HashMap<String, u16>,
}

impl Writer {
    fn name(&mut self, name: &str) {
        let mut rest = name.trim_end_matches('.');
        loop {
            if rest.is_empty() {
                self.out.push(0);
                return;
            }
            if let Some(offset) = self.names.get(rest) {
                self.out.extend_from_slice(&(0xc000 | offset).to_be_bytes());
                return;
            }
            if let Ok(offset) = u16::try_from(self.out.len())
                && offset < 0x4000
            {
                self.names.insert(rest.to_owned(), offset);
            }
            let (label, tail) = rest.split_once('.').unwrap_or((rest, ""));
            let label = &label.as_bytes()[..label.len().min(63)];
            self.out.push(label.len() as u8);
            self.out.extend_from_slice(label);
            rest = tail;
        }
    }

    fn u16(&mut self, value: u16) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    fn u32(&mut self, value: u32) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    fn record(&mut self, record: &Record) {
        self.name(&record.name);
        self.u16(record.data.kind());
        self.u16(1);
        self.u32(record.ttl);
        let length_at = self.out.len();
        self.u16(0);
        match &record.data {
            Data::A(address) => self.out.extend_from_slice(&address.octets()),
            Data::Aaaa(address) => self.out.extend_from_slice(&address.octets()),
            Data::Cname(target) | Data::Ptr(target) | Data::Ns(target) => self.name(target),
            Data::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                self.u16(*priority);
                self.u16(*weight);
                self.u16(*port);
                // Targets of SRV records are not compressed (RFC 2782).
                for label in target.split('.').filter(|l| !l.is_empty()) {
                    let label = &label.as_bytes()[..label.len().min(63)];
                    self.out.push(label.len() as u8);
                    self.out.extend_from_slice(label);
                }
                self.out.push(0);
            }
            Data::Soa {
                mname,
                rname,
                serial,
                minimum,
            } => {
                self.name(mname);
                self.name(rname);
                self.u32(*serial);
                self.u32(7200);
                self.u32(1800);
                self.u32(86400);
                self.u32(*minimum);
            }
        }
        let length = (self.out.len() - length_at - 2) as u16;
        self.out[length_at..length_at + 2].copy_from_slice(&length.to_be_bytes());
    }
}

/// An answer to send.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    /// The response code.
    pub rcode: u8,
    /// Whether this server is the zone's authority.
    pub authoritative: bool,
    /// The answers.
    pub answers: Vec<Record>,
    /// The authority section (the zone's SOA on a negative answer).
    pub authority: Vec<Record>,
    /// Additional records (the addresses of SRV targets).
    pub additional: Vec<Record>,
}

/// The response to `query` holding `answer`; at most `limit` bytes, else truncated (`TC`,
/// the records left out).
pub fn write_response(query: &Query, answer: &Answer, limit: usize) -> Vec<u8> {
    let full = encode(query, answer, false);
    if full.len() <= limit {
        return full;
    }
    encode(
        query,
        &Answer {
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            ..answer.clone()
        },
        true,
    )
}

fn encode(query: &Query, answer: &Answer, truncated: bool) -> Vec<u8> {
    let mut writer = Writer {
        out: Vec::with_capacity(512),
        names: HashMap::new(),
    };
    writer.u16(query.id);
    let mut flags: u16 = 0x8000 | (u16::from(query.opcode & 0xf) << 11) | 0x0080;
    if answer.authoritative {
        flags |= 0x0400;
    }
    if truncated {
        flags |= 0x0200;
    }
    if query.recursion_desired {
        flags |= 0x0100;
    }
    flags |= u16::from(answer.rcode & 0xf);
    writer.u16(flags);
    writer.u16(1);
    writer.u16(answer.answers.len() as u16);
    writer.u16(answer.authority.len() as u16);
    let opt = query.udp_size.is_some();
    writer.u16(answer.additional.len() as u16 + u16::from(opt));
    writer.name(&query.question.name);
    writer.u16(query.question.kind);
    writer.u16(query.question.class);
    for record in answer
        .answers
        .iter()
        .chain(&answer.authority)
        .chain(&answer.additional)
    {
        writer.record(record);
    }
    if opt {
        // Our own OPT: the size we take, no options.
        writer.out.push(0);
        writer.u16(kind::OPT);
        writer.u16(1232);
        writer.u32(0);
        writer.u16(0);
    }
    writer.out
}

/// A bare response with `rcode` to a message whose header could be read, or nothing.
pub fn error_response(message: &[u8], rcode: u8) -> Option<Vec<u8>> {
    if message.len() < 12 || message[2] & 0x80 != 0 {
        return None;
    }
    // A query that reads gets its question back, as resolvers expect.
    if let Ok(query) = parse_query(message) {
        let answer = Answer {
            rcode,
            ..Answer::default()
        };
        return Some(encode(&query, &answer, false));
    }
    let mut out = message[..12].to_vec();
    out[2] = 0x80 | (message[2] & 0x79);
    out[3] = 0x80 | (rcode & 0xf);
    for b in &mut out[4..12] {
        *b = 0;
    }
    Some(out)
}

/// A query for `name`/`kind` (the tests' and the benchmark's client).
pub fn write_query(id: u16, name: &str, kind: u16) -> Vec<u8> {
    let mut writer = Writer {
        out: Vec::new(),
        names: HashMap::new(),
    };
    writer.u16(id);
    writer.u16(0x0100);
    writer.u16(1);
    writer.u16(0);
    writer.u16(0);
    writer.u16(0);
    writer.name(name);
    writer.u16(kind);
    writer.u16(1);
    writer.out
}

/// A response as read: its code, whether it was truncated, and its answers (name and data).
pub type Read = (u8, bool, Vec<(String, Data)>);

/// The header's code and the answers' data of a response (the tests' reader).
///
/// # Errors
/// A message that cannot be read.
pub fn read_answers(message: &[u8]) -> Result<Read, Malformed> {
    if message.len() < 12 {
        return Err(Malformed);
    }
    let rcode = message[3] & 0xf;
    let truncated = message[2] & 0x02 != 0;
    let answers = u16_at(message, 6)?;
    let (_, mut at) = read_name(message, 12)?;
    at += 4;
    let mut out = Vec::new();
    for _ in 0..answers {
        let (name, after) = read_name(message, at)?;
        let kind = u16_at(message, after)?;
        let length = usize::from(u16_at(message, after + 8)?);
        let data_at = after + 10;
        let data = message.get(data_at..data_at + length).ok_or(Malformed)?;
        let parsed = match kind {
            kind::A if length == 4 => Data::A(Ipv4Addr::new(data[0], data[1], data[2], data[3])),
            kind::CNAME => Data::Cname(read_name(message, data_at)?.0),
            kind::PTR => Data::Ptr(read_name(message, data_at)?.0),
            kind::SRV if length >= 7 => Data::Srv {
                priority: u16_at(message, data_at)?,
                weight: u16_at(message, data_at + 2)?,
                port: u16_at(message, data_at + 4)?,
                target: read_name(message, data_at + 6)?.0,
            },
            _ => {
                at = data_at + length;
                continue;
            }
        };
        out.push((name, parsed));
        at = data_at + length;
    }
    Ok((rcode, truncated, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_round_trips_with_compression() {
        let message = write_query(7, "web.default.svc.cluster.local", kind::A);
        let query = parse_query(&message).unwrap();
        assert_eq!(query.question.name, "web.default.svc.cluster.local");
        assert_eq!(query.id, 7);
        assert!(query.recursion_desired);
        let answer = Answer {
            authoritative: true,
            answers: vec![Record {
                name: "web.default.svc.cluster.local".into(),
                ttl: 5,
                data: Data::A(Ipv4Addr::new(10, 96, 0, 20)),
            }],
            ..Answer::default()
        };
        let response = write_response(&query, &answer, 512);
        // The answer's name is a pointer to the question's.
        assert_eq!(response.len(), message.len() + 2 + 10 + 4);
        let (code, truncated, answers) = read_answers(&response).unwrap();
        assert_eq!((code, truncated), (rcode::NOERROR, false));
        assert_eq!(answers[0].1, Data::A(Ipv4Addr::new(10, 96, 0, 20)));
    }

    #[test]
    fn too_long_for_udp_is_truncated() {
        let query =
            parse_query(&write_query(1, "many.default.svc.cluster.local", kind::A)).unwrap();
        let answers = (0..100u8)
            .map(|n| Record {
                name: "many.default.svc.cluster.local".into(),
                ttl: 5,
                data: Data::A(Ipv4Addr::new(10, 244, 0, n)),
            })
            .collect();
        let answer = Answer {
            answers,
            ..Answer::default()
        };
        let (_, truncated, records) = read_answers(&write_response(&query, &answer, 512)).unwrap();
        assert!(truncated);
        assert!(records.is_empty());
        let (_, truncated, records) =
            read_answers(&write_response(&query, &answer, 65535)).unwrap();
        assert!(!truncated);
        assert_eq!(records.len(), 100);
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        assert_eq!(parse_query(&[0; 5]).unwrap_err(), Malformed);
        let mut looped = write_query(1, "a", kind::A);
        looped[12] = 0xc0;
        looped[13] = 12;
        assert!(parse_query(&looped).is_err());
        assert!(error_response(&[1, 2, 3], rcode::FORMERR).is_none());
    }
}
