//! The query of a DNS prober, encoded once: every query of a run asks the same question and
//! differs only in its 16-bit ID, so the wire form is built at set-up and each query copies it
//! with a fresh ID. Reading an answer is pure too: tested without sockets.

use hickory_proto::op::{Edns, Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};

/// EDNS payload size offered, as hickory's client offered it before (the DNS Flag Day value):
/// an answer up to this size comes back whole over UDP.
pub const EDNS_PAYLOAD: u16 = 1232;

/// The largest datagram read; an answer beyond the offered payload is truncated by the kernel
/// and fails to parse, which is the server's fault and reported as such.
pub const MAX_DATAGRAM: usize = 4096;

/// One question (name, type, class IN), with recursion desired and EDNS, as wire bytes.
#[derive(Clone, Debug)]
pub struct Question {
    query: Query,
    wire: Vec<u8>,
}

/// What a received message is, for the query with a given ID.
#[derive(Debug, PartialEq, Eq)]
pub enum Reading {
    /// The answer, with its RCODE.
    Answer(ResponseCode),
    /// Not an answer to this query (another ID, not a response, another question): over UDP
    /// it is ignored as a stray or forged datagram; over a stream of our own it is an error.
    NotOurs(&'static str),
    /// Our ID, but not a DNS message.
    Malformed(String),
}

/// Why a question cannot be encoded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EncodeError(String);

impl Question {
    /// The question for `name` and `record_type`.
    pub fn new(name: Name, record_type: RecordType) -> Result<Question, EncodeError> {
        let mut query = Query::query(name, record_type);
        query.set_query_class(DNSClass::IN);
        let mut message = Message::query();
        message.metadata.id = 0;
        message.metadata.recursion_desired = true;
        message.add_query(query.clone());
        message
            .edns
            .get_or_insert_with(Edns::new)
            .set_max_payload(EDNS_PAYLOAD);
        let wire = message.to_vec().map_err(|e| EncodeError(e.to_string()))?;
        Ok(Question { query, wire })
    }

    /// The query with `id`, as sent over UDP.
    pub fn datagram(&self, id: u16) -> Vec<u8> {
        let mut wire = self.wire.clone();
        wire[..2].copy_from_slice(&id.to_be_bytes());
        wire
    }

    /// The query with `id`, as sent over TCP and TLS: prefixed by its length (RFC 1035 4.2.2).
    pub fn framed(&self, id: u16) -> Vec<u8> {
        let mut framed = Vec::with_capacity(self.wire.len() + 2);
        // A question is a name of at most 255 bytes: its message always fits the prefix.
        framed.extend_from_slice(&(self.wire.len() as u16).to_be_bytes());
        framed.extend_from_slice(&self.wire);
        framed[2..4].copy_from_slice(&id.to_be_bytes());
        framed
    }

    /// Reads `bytes` as the answer to the query with `id`. The ID is checked before anything
    /// is parsed, so a flood of forged datagrams costs two byte comparisons each.
    pub fn read(&self, id: u16, bytes: &[u8]) -> Reading {
        match bytes.first_chunk::<2>() {
            Some(head) if u16::from_be_bytes(*head) == id => {}
            Some(_) => return Reading::NotOurs("another message id"),
            None => return Reading::NotOurs("shorter than a message id"),
        }
        let message = match Message::from_vec(bytes) {
            Ok(m) => m,
            Err(e) => return Reading::Malformed(e.to_string()),
        };
        if message.metadata.message_type != MessageType::Response {
            return Reading::NotOurs("not a response");
        }
        // Names compare without regard to case (RFC 4343); a server may echo any case.
        if message.queries.first() != Some(&self.query) || message.queries.len() != 1 {
            return Reading::NotOurs("another question");
        }
        Reading::Answer(message.metadata.response_code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{RData, Record};

    fn question() -> Question {
        let mut name = Name::from_ascii("probe.test.").unwrap();
        name.set_fqdn(true);
        Question::new(name, RecordType::A).unwrap()
    }

    fn answer_to(query: &[u8], rcode: ResponseCode) -> Vec<u8> {
        let asked = Message::from_vec(query).unwrap();
        let mut answer = Message::response(asked.metadata.id, asked.metadata.op_code);
        answer.metadata.response_code = rcode;
        answer.add_query(asked.queries[0].clone());
        answer.add_answer(Record::from_rdata(
            asked.queries[0].name().clone(),
            60,
            RData::A(A::new(127, 0, 0, 1)),
        ));
        answer.to_vec().unwrap()
    }

    #[test]
    fn each_query_carries_its_id_with_recursion_and_edns() {
        let q = question();
        let wire = q.datagram(0xbeef);
        let parsed = Message::from_vec(&wire).unwrap();
        assert_eq!(parsed.metadata.id, 0xbeef);
        assert!(parsed.metadata.recursion_desired);
        assert_eq!(parsed.queries.len(), 1);
        assert_eq!(parsed.queries[0].query_type(), RecordType::A);
        assert_eq!(parsed.edns.as_ref().map(|e| e.max_payload()), Some(1232));
        let framed = q.framed(0x0102);
        assert_eq!(
            usize::from(u16::from_be_bytes([framed[0], framed[1]])),
            wire.len()
        );
        assert_eq!(&framed[2..4], &[1, 2]);
        assert_eq!(&framed[4..], &wire[2..]);
    }

    #[test]
    fn only_an_answer_to_this_id_and_question_is_taken() {
        let q = question();
        let query = q.datagram(7);
        assert_eq!(
            q.read(7, &answer_to(&query, ResponseCode::NoError)),
            Reading::Answer(ResponseCode::NoError)
        );
        assert_eq!(
            q.read(7, &answer_to(&query, ResponseCode::NXDomain)),
            Reading::Answer(ResponseCode::NXDomain)
        );
        assert_eq!(
            q.read(8, &answer_to(&query, ResponseCode::NoError)),
            Reading::NotOurs("another message id")
        );
        assert_eq!(
            q.read(7, &[0]),
            Reading::NotOurs("shorter than a message id")
        );
        // Our own query reflected back is not an answer.
        assert_eq!(q.read(7, &query), Reading::NotOurs("not a response"));
        // The same ID answering another name.
        let other = Question::new(Name::from_ascii("other.test.").unwrap(), RecordType::A)
            .unwrap()
            .datagram(7);
        assert_eq!(
            q.read(7, &answer_to(&other, ResponseCode::NoError)),
            Reading::NotOurs("another question")
        );
        // The question echoed in another case is still ours.
        let upper = Question::new(Name::from_ascii("PROBE.Test.").unwrap(), RecordType::A)
            .unwrap()
            .datagram(7);
        assert_eq!(
            q.read(7, &answer_to(&upper, ResponseCode::NoError)),
            Reading::Answer(ResponseCode::NoError)
        );
        assert!(matches!(q.read(7, &[0, 7, 0x80]), Reading::Malformed(_)));
    }
}
