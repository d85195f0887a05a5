//! The members of a coordinator a client may call, and which one it calls now.
//!
//! A coordinator is given as a comma-separated list of URLs (`--coordinator http://A:7878,http://B:7878`): the
//! members of a replicated coordinator, of which only the leader serves, or just one URL. A client calls one
//! member at a time and moves on as a failed call says (see `sweep_proto::not_leader` for the protocol): to the
//! leader a not-leader answer names, which is added to the list if it is not in it, or else to the next member
//! in the list, round and round. [`Members`] keeps that list and that choice; it makes no connection itself.

use tonic::Status;
use tracing::warn;

use crate::connect::{endpoint, ClientSecurity, ConnectError};

/// The members of a coordinator, in the order given, and the one called now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members {
    urls: Vec<String>,
    current: usize,
}

/// What a failed call says about the member that was called, after [`Members::failover`] moved on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failover {
    /// A member that is not the leader answered: it did nothing with the call. Now at the leader it named, or
    /// at the next member when it named none. Any call may be sent again.
    NotLeader,
    /// The member could not be reached, or the call was lost or ran out of time on the way (`UNAVAILABLE`,
    /// `DEADLINE_EXCEEDED`, and tonic's own timeouts, `CANCELLED`): the call may or may not have been carried
    /// out. Now at the next member (the same
    /// one when there is only one).
    Unreachable,
    /// Any other answer: the member that gave it is the one to call, and sending the same call again would get
    /// the same answer. Still at that member.
    Answered,
}

impl Members {
    /// The members in `list`: URLs separated by commas, whitespace around each ignored. Each URL is checked as a
    /// single one always was (its syntax, and its scheme against the TLS settings of `security`); an empty entry
    /// is refused. A URL given twice is kept once.
    pub fn parse(list: &str, security: &ClientSecurity) -> Result<Members, ConnectError> {
        let mut urls: Vec<String> = Vec::new();
        for (i, entry) in list.split(',').enumerate() {
            let url = entry.trim();
            if url.is_empty() {
                return Err(ConnectError::BadUrlList {
                    list: list.to_string(),
                    why: format!(
                        "entry {} is empty (give one or more URLs separated by commas)",
                        i + 1
                    ),
                });
            }
            endpoint(url, security)?;
            if !urls.iter().any(|u| u == url) {
                urls.push(url.to_string());
            }
        }
        Ok(Members { urls, current: 0 })
    }

    /// The member called now.
    pub fn current(&self) -> &str {
        &self.urls[self.current]
    }

    /// Every member known, in order: those given, then leaders named by not-leader answers.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Always false: there is at least one member.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// How many times one call is sent at most, counting failed connections: twice around the members as they
    /// are when the call starts, plus two, so a leader named by the last member is still reached. Leaders named
    /// on the way do not raise it: members that keep naming new leaders cannot keep a call going forever.
    pub fn max_attempts(&self) -> usize {
        2 * self.urls.len() + 2
    }

    /// Moves to the next member, after the last back to the first.
    pub fn advance(&mut self) {
        self.current = (self.current + 1) % self.urls.len();
    }

    /// Moves to `url`, adding it after the others if it is not a member yet.
    pub fn follow(&mut self, url: &str) {
        let url = url.trim();
        self.current = match self.urls.iter().position(|u| u == url) {
            Some(i) => i,
            None => {
                self.urls.push(url.to_string());
                self.urls.len() - 1
            }
        };
    }

    /// Moves on as the failed call's `status` says (see [`Failover`]) and tells what the failure was. A leader
    /// named with a URL these settings cannot use (`http://` when `security` has TLS files, say) is skipped for
    /// the next member.
    pub fn failover(&mut self, status: &Status, security: &ClientSecurity) -> Failover {
        if sweep_proto::is_not_leader(status) {
            match sweep_proto::leader_hint(status) {
                Some(leader) => match endpoint(&leader, security) {
                    Ok(_) => self.follow(&leader),
                    Err(e) => {
                        warn!(member = %self.current(), error = %e, "the leader a member named cannot be used; trying the next member");
                        self.advance();
                    }
                },
                None => self.advance(),
            }
            return Failover::NotLeader;
        }
        if sweep_proto::deadline::is_lost(status) {
            self.advance();
            return Failover::Unreachable;
        }
        Failover::Answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &str) -> Result<Members, ConnectError> {
        Members::parse(list, &ClientSecurity::default())
    }

    #[test]
    fn a_list_is_urls_separated_by_commas() {
        let m = parse("http://a:1").unwrap();
        assert_eq!(m.urls(), ["http://a:1"]);
        assert_eq!(m.current(), "http://a:1");
        let m = parse(" http://a:1 ,\thttp://b:2,http://c:3 ").unwrap();
        assert_eq!(m.urls(), ["http://a:1", "http://b:2", "http://c:3"]);
        assert_eq!(m.max_attempts(), 8);
        let m = parse("http://a:1,http://a:1, http://b:2").unwrap();
        assert_eq!(
            m.urls(),
            ["http://a:1", "http://b:2"],
            "a repeated URL is one member"
        );
    }

    #[test]
    fn an_empty_entry_or_a_bad_url_is_refused_by_name() {
        for (list, entry) in [
            ("", "entry 1"),
            (" ", "entry 1"),
            ("http://a:1,,http://b:2", "entry 2"),
            ("http://a:1,", "entry 2"),
            (",http://a:1", "entry 1"),
        ] {
            let e = parse(list).unwrap_err();
            assert!(
                matches!(e, ConnectError::BadUrlList { .. }),
                "{list:?}: {e}"
            );
            let text = e.to_string();
            assert!(text.contains(&format!("`{list}`")), "{text}");
            assert!(text.contains(entry), "{text}");
        }
        let e = parse("http://a:1, not a url").unwrap_err();
        assert!(
            matches!(e, ConnectError::BadUrl { ref url, .. } if url == "not a url"),
            "{e}"
        );
        // Each URL is checked against the TLS settings, as a single one is.
        let tls = ClientSecurity {
            tls_ca: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let e = Members::parse("https://a:1,http://b:2", &tls).unwrap_err();
        assert!(matches!(e, ConnectError::TlsFile { .. }), "{e}");
        let e = Members::parse("http://b:2", &tls).unwrap_err();
        assert!(matches!(e, ConnectError::TlsWithoutHttps { .. }), "{e}");
    }

    #[test]
    fn failed_calls_move_to_the_named_leader_or_the_next_member() {
        let sec = ClientSecurity::default();
        let mut m = parse("http://a:1,http://b:2").unwrap();
        assert_eq!(
            m.failover(&Status::not_found("no job 7"), &sec),
            Failover::Answered
        );
        assert_eq!(m.current(), "http://a:1");
        assert_eq!(
            m.failover(&Status::unavailable("transport error"), &sec),
            Failover::Unreachable
        );
        assert_eq!(m.current(), "http://b:2");
        let named = |url: &str| sweep_proto::not_leader(Some(url));
        assert_eq!(m.failover(&named("http://a:1"), &sec), Failover::NotLeader);
        assert_eq!(m.current(), "http://a:1");
        // A leader not in the list joins it.
        assert_eq!(m.failover(&named("http://c:3"), &sec), Failover::NotLeader);
        assert_eq!(m.current(), "http://c:3");
        assert_eq!(m.urls(), ["http://a:1", "http://b:2", "http://c:3"]);
        // No leader known: the next member, round and round.
        assert_eq!(
            m.failover(&sweep_proto::not_leader(None), &sec),
            Failover::NotLeader
        );
        assert_eq!(m.current(), "http://a:1");
        // A named leader that cannot be a URL is passed over.
        assert_eq!(m.failover(&named("no url"), &sec), Failover::NotLeader);
        assert_eq!(m.current(), "http://b:2");
        assert_eq!(m.len(), 3);
        // tonic's own timeouts end a call with CANCELLED: the member did not answer in time.
        assert_eq!(
            m.failover(&Status::cancelled("Timeout expired"), &sec),
            Failover::Unreachable
        );
        assert_eq!(m.current(), "http://c:3");
        // One member: moving on is calling it again.
        let mut one = parse("http://a:1").unwrap();
        assert_eq!(
            one.failover(&Status::deadline_exceeded("slow"), &sec),
            Failover::Unreachable
        );
        assert_eq!(one.current(), "http://a:1");
    }
}
