//! Who may read `/metrics` when it is served securely: as controller-runtime's
//! `WithAuthenticationAndAuthorization` filter (and kube-rbac-proxy before it) decides, the
//! request's bearer token must pass a TokenReview, and the user it names must be allowed `get`
//! on the non-resource URL `/metrics` by a SubjectAccessReview. Prometheus is given that by a
//! binding to a `metrics-reader` ClusterRole.
//!
//! The API server is asked at most once per token a [`ALLOWED_FOR`] (a refusal, [`REFUSED_FOR`]),
//! at most [`REVIEWS_AT_ONCE`] reviews are in flight, one of them at most for each address the
//! requests come from (so that a Pod sending made-up tokens takes one turn, and a scraper
//! elsewhere waits for no more than a review), and at most [`MAX_CACHED`] decisions are kept,
//! refusals pushed out before any allowed token (so that made-up tokens cannot push a scraper's
//! out). A decision is kept under the SHA-256 of its token: the token itself is neither kept nor
//! logged. Before any of that, a token that cannot be one the API server accepts (not a JSON Web
//! Token, as ServiceAccount and OIDC tokens are, or one whose `exp` has passed) is refused at
//! once: made-up tokens cost neither a review nor a turn.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use http::HeaderValue;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
// Tokio's clock, which tests can pause and move.
use tokio::time::Instant;

/// How long an allowed token is trusted before it is reviewed again (controller-runtime keeps
/// an authentication a minute).
pub const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refused token stays refused, so that a misconfigured scraper costs the API server
/// little while a fixed binding takes effect soon.
pub const REFUSED_FOR: Duration = Duration::from_secs(10);
/// Decisions kept at once; beyond that, the one that would expire first goes.
pub const MAX_CACHED: usize = 1024;
/// Reviews sent to the API server at once; more requests wait.
pub const REVIEWS_AT_ONCE: usize = 4;
/// The longest token reviewed; Kubernetes' ServiceAccount tokens are around a kilobyte.
const MAX_TOKEN: usize = 16 * 1024;
/// How long a review may take before the request is answered 503.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// What is asked of the SubjectAccessReview.
const PATH: &str = "/metrics";
const VERB: &str = "get";

/// What the API server said of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// A valid token whose user may not `get /metrics`: 403.
    Forbidden,
    /// No valid token: 401.
    Unauthenticated,
}

/// Why a request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token, or one the API server does not accept: 401.
    Unauthenticated,
    /// 403.
    Forbidden,
    /// The API server could not be asked: 503, not remembered.
    Unavailable(String),
}

/// Reviews a token: the API server in production, a stand-in in unit tests.
pub trait Reviewer: Send + Sync {
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Decision, String>>;
}

/// Reviews tokens with the API server through `client`, which may create `tokenreviews` and
/// `subjectaccessreviews`.
pub struct KubernetesReviewer {
    client: kube::Client,
    /// The audience a token must be issued for; `None`: the API server's own audiences.
    audience: Option<String>,
}

impl KubernetesReviewer {
    pub fn new(client: kube::Client, audience: Option<String>) -> Self {
        Self { client, audience }
    }

    async fn ask(&self, token: &str) -> Result<Decision, String> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: self.audience.clone().map(|a| vec![a]),
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let status = reviewed.status.unwrap_or_default();
        let for_us = issued_for(self.audience.as_deref(), status.audiences.as_deref());
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) if for_us => user,
            _ => return Ok(Decision::Unauthenticated),
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(PATH.to_owned()),
                    verb: Some(VERB.to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        let allowed = reviewed.status.is_some_and(|s| s.allowed);
        tracing::debug!(
            user = user.username.as_deref().unwrap_or(""),
            allowed,
            "metrics: reviewed a scraper"
        );
        Ok(if allowed {
            Decision::Allowed
        } else {
            Decision::Forbidden
        })
    }
}

impl Reviewer for KubernetesReviewer {
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(self.ask(token))
    }
}

/// Whether a token the API server authenticated is one for `audience`, from the audiences
/// the review says it is valid for. The API server answers with those it was asked about; an
/// authenticator behind it (a webhook) that ignores audiences answers none, which does not
/// count as ours.
fn issued_for(audience: Option<&str>, valid_for: Option<&[String]>) -> bool {
    audience.is_none_or(|audience| valid_for.is_some_and(|valid| valid.iter().any(|v| v == audience)))
}

/// Decides requests by their `Authorization` header, remembering decisions for a while.
pub struct Authorizer {
    reviewer: Box<dyn Reviewer>,
    decisions: Mutex<HashMap<[u8; 32], (Decision, Instant)>>,
    reviews: Semaphore,
    /// Each address's one turn at a review.
    peers: super::per_address::PerAddress,
}

impl Authorizer {
    pub fn new(reviewer: impl Reviewer + 'static) -> Self {
        Self {
            reviewer: Box::new(reviewer),
            decisions: Mutex::default(),
            reviews: Semaphore::new(REVIEWS_AT_ONCE),
            peers: super::per_address::PerAddress::new(1),
        }
    }

    /// The API server's reviews, through `client`, of tokens for `audience` (`None`: for the
    /// API server itself).
    pub fn kubernetes(client: kube::Client, audience: Option<String>) -> Self {
        Self::new(KubernetesReviewer::new(client, audience))
    }

    /// Whether a request from `peer` with this `Authorization` header may read `/metrics`.
    pub async fn check(&self, peer: IpAddr, authorization: Option<&HeaderValue>) -> Result<(), Refusal> {
        let token = authorization
            .and_then(|h| h.to_str().ok())
            .and_then(bearer_token)
            .ok_or(Refusal::Unauthenticated)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if !looks_like_a_live_jwt(token, now) {
            return Err(Refusal::Unauthenticated);
        }
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let decision = match self.remembered(&key) {
            Some(decision) => decision,
            None => {
                let _peer_turn = self.peers.take(peer).await;
                let _turn = self.reviews.acquire().await.expect("never closed");
                // Another request may have asked for the same token meanwhile.
                match self.remembered(&key) {
                    Some(decision) => decision,
                    None => {
                        let decision = tokio::time::timeout(REVIEW_TIMEOUT, self.reviewer.review(token))
                            .await
                            .map_err(|_| "no answer from the API server".to_owned())
                            .and_then(|answer| answer)
                            .map_err(|e| {
                                tracing::warn!(error = %e, "metrics: cannot review a scraper's token");
                                Refusal::Unavailable(e)
                            })?;
                        self.remember(key, decision);
                        decision
                    }
                }
            }
        };
        match decision {
            Decision::Allowed => Ok(()),
            Decision::Forbidden => Err(Refusal::Forbidden),
            Decision::Unauthenticated => Err(Refusal::Unauthenticated),
        }
    }

    fn remembered(&self, key: &[u8; 32]) -> Option<Decision> {
        let decisions = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
        decisions
            .get(key)
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(decision, _)| *decision)
    }

    fn remember(&self, key: [u8; 32], decision: Decision) {
        let now = Instant::now();
        let until = now
            + match decision {
                Decision::Allowed => ALLOWED_FOR,
                Decision::Forbidden | Decision::Unauthenticated => REFUSED_FOR,
            };
        let mut decisions = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
        if decisions.len() >= MAX_CACHED && !decisions.contains_key(&key) {
            decisions.retain(|_, (_, until)| now < *until);
            if decisions.len() >= MAX_CACHED {
                // Refusals go first, whenever they would expire: made-up tokens must not push
                // out a scraper's.
                let first_to_expire = decisions
                    .iter()
                    .min_by_key(|(_, (decision, until))| (*decision == Decision::Allowed, *until))
                    .map(|(key, _)| *key);
                if let Some(first) = first_to_expire {
                    decisions.remove(&first);
                }
            }
        }
        decisions.insert(key, (decision, until));
    }

    /// Decisions kept now (expired ones included until they are pushed out).
    pub fn cached(&self) -> usize {
        self.decisions.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Whether `token` could be one the API server accepts from a scraper: a JSON Web Token (three
/// base64url parts, whose header names an algorithm and whose claims are a JSON object) that
/// has not expired at `now` (seconds since the epoch). Its signature is the API server's to
/// check. Static and bootstrap tokens are not JWTs, and are refused: scrapers send their
/// ServiceAccount's token.
fn looks_like_a_live_jwt(token: &str, now: i64) -> bool {
    use base64::Engine;
    if token.len() > MAX_TOKEN {
        return false;
    }
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let decode = |part: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .filter(serde_json::Value::is_object)
    };
    let (Some(header), Some(claims)) = (decode(header), decode(claims)) else {
        return false;
    };
    !signature.is_empty()
        && header.get("alg").is_some_and(serde_json::Value::is_string)
        && claims
            .get("exp")
            .is_none_or(|exp| exp.as_i64().is_some_and(|exp| exp > now))
}

/// The token of `Bearer <token>` (the scheme in any case, as RFC 7235 has it).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Tokens shaped as the API server's, for the tests of the servers that review them.
#[cfg(test)]
pub(crate) mod test_tokens {
    pub(crate) fn base64url(text: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    /// A token shaped as the API server's (its signature is the reviewer's to check), for the
    /// user `subject`, expiring at `exp` if given.
    pub(crate) fn jwt(subject: &str, exp: Option<i64>) -> String {
        let claims = match exp {
            Some(exp) => serde_json::json!({ "sub": subject, "exp": exp }),
            None => serde_json::json!({ "sub": subject }),
        };
        format!(
            "{}.{}.c2lnbmF0dXJl",
            base64url(r#"{"alg":"RS256","kid":"test"}"#),
            base64url(&claims.to_string())
        )
    }

    /// The user a token of [`jwt`] names.
    pub(crate) fn subject(token: &str) -> String {
        use base64::Engine;
        let claims = token.split('.').nth(1).unwrap();
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .unwrap();
        let claims: serde_json::Value = serde_json::from_slice(&claims).unwrap();
        claims["sub"].as_str().unwrap().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::test_tokens::{base64url, jwt, subject};
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Allows `good`, forbids `other`, refuses the rest; counts the reviews.
    #[derive(Clone, Default)]
    struct Counted(Arc<AtomicUsize>);

    impl Reviewer for Counted {
        fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Decision, String>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                Ok(match subject(token).as_str() {
                    "good" => Decision::Allowed,
                    "other" => Decision::Forbidden,
                    "down" => return Err("unreachable".into()),
                    _ => Decision::Unauthenticated,
                })
            })
        }
    }

    /// Where the tests' requests come from.
    const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    /// `value`, with the token of a `Bearer` one made a JWT for the user it names.
    fn header(value: &str) -> HeaderValue {
        let value = match value.split_once(' ') {
            Some((scheme, user)) if scheme.eq_ignore_ascii_case("bearer") && !user.trim().is_empty() => {
                format!("{scheme} {}", jwt(user.trim(), None))
            }
            _ => value.to_owned(),
        };
        HeaderValue::from_str(&value).unwrap()
    }

    #[tokio::test]
    async fn requests_are_decided_by_their_bearer_token_and_asked_once_per_token() {
        let reviews = Counted::default();
        let auth = Authorizer::new(reviews.clone());
        assert_eq!(auth.check(HERE, None).await, Err(Refusal::Unauthenticated));
        assert_eq!(
            auth.check(HERE, Some(&header("Basic Zm9vOmJhcg=="))).await,
            Err(Refusal::Unauthenticated)
        );
        assert_eq!(
            auth.check(HERE, Some(&header("Bearer "))).await,
            Err(Refusal::Unauthenticated)
        );
        assert_eq!(
            reviews.0.load(Ordering::SeqCst),
            0,
            "nothing to review, nothing asked"
        );

        for _ in 0..3 {
            assert_eq!(auth.check(HERE, Some(&header("Bearer good"))).await, Ok(()));
            assert_eq!(
                auth.check(HERE, Some(&header("bearer other"))).await,
                Err(Refusal::Forbidden)
            );
            assert_eq!(
                auth.check(HERE, Some(&header("Bearer forged"))).await,
                Err(Refusal::Unauthenticated)
            );
        }
        assert_eq!(reviews.0.load(Ordering::SeqCst), 3, "one review per token");

        // An API server that cannot answer is not remembered as a refusal.
        for _ in 0..2 {
            assert!(matches!(
                auth.check(HERE, Some(&header("Bearer down"))).await,
                Err(Refusal::Unavailable(_))
            ));
        }
        assert_eq!(reviews.0.load(Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn the_cache_is_bounded_and_keeps_no_token() {
        let reviews = Counted::default();
        let auth = Authorizer::new(reviews.clone());
        for i in 0..MAX_CACHED + 100 {
            let token = format!("forged-token-{i}");
            let _ = auth.check(HERE, Some(&header(&format!("Bearer {token}")))).await;
        }
        assert_eq!(auth.cached(), MAX_CACHED);
        assert_eq!(auth.check(HERE, Some(&header("Bearer good"))).await, Ok(()));
        assert_eq!(auth.cached(), MAX_CACHED);
        assert!(
            auth.decisions
                .lock()
                .unwrap()
                .contains_key(&<[u8; 32]>::from(Sha256::digest(jwt("good", None).as_bytes())))
        );
    }

    /// Answers every review after `delay`: allows `good`, refuses the rest.
    struct Slow(Duration);

    impl Reviewer for Slow {
        fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Decision, String>> {
            Box::pin(async move {
                tokio::time::sleep(self.0).await;
                Ok(if subject(token) == "good" {
                    Decision::Allowed
                } else {
                    Decision::Unauthenticated
                })
            })
        }
    }

    /// One address sending a hundred made-up tokens at once takes one turn at the reviews: a
    /// scraper from elsewhere is reviewed at once, not after the hundred. (With every turn open
    /// to anyone, it would wait for 25 reviews.)
    #[tokio::test(start_paused = true)]
    async fn an_address_sending_made_up_tokens_takes_one_turn_and_a_scraper_is_reviewed_at_once() {
        let review = Duration::from_millis(100);
        let auth = Arc::new(Authorizer::new(Slow(review)));
        let pod: IpAddr = [10, 1, 2, 3].into();
        let flood: Vec<_> = (0..100)
            .map(|i| {
                let auth = auth.clone();
                tokio::spawn(async move {
                    auth.check(pod, Some(&header(&format!("Bearer made-up-{i}"))))
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let asked = tokio::time::Instant::now();
        let scraper: IpAddr = [10, 9, 8, 7].into();
        assert_eq!(auth.check(scraper, Some(&header("Bearer good"))).await, Ok(()));
        assert!(
            asked.elapsed() <= review * 2,
            "the scraper waited {:?}",
            asked.elapsed()
        );
        for refused in flood {
            assert_eq!(refused.await.unwrap(), Err(Refusal::Unauthenticated));
        }
        assert!(auth.peers.addresses() == 0, "no address is kept once served");
    }

    /// Made-up tokens push out refusals, never a scraper's allowed token, even near the end of
    /// its time, when fresh refusals would outlast it.
    #[tokio::test(start_paused = true)]
    async fn made_up_tokens_never_push_out_an_allowed_one() {
        let reviews = Counted::default();
        let auth = Authorizer::new(reviews.clone());
        assert_eq!(auth.check(HERE, Some(&header("Bearer good"))).await, Ok(()));
        tokio::time::advance(ALLOWED_FOR - REFUSED_FOR / 2).await;
        for i in 0..2 * MAX_CACHED {
            let _ = auth
                .check(HERE, Some(&header(&format!("Bearer made-up-{i}"))))
                .await;
        }
        let before = reviews.0.load(Ordering::SeqCst);
        assert_eq!(auth.check(HERE, Some(&header("Bearer good"))).await, Ok(()));
        assert_eq!(
            reviews.0.load(Ordering::SeqCst),
            before,
            "the allowed token was still known"
        );
    }

    /// Tokens that cannot be the API server's are refused before any review or turn: a
    /// thousand made-up ones ask the API server nothing, nor does an expired JWT.
    #[test]
    fn a_token_counts_as_issued_for_the_audience_only_when_the_review_says_so() {
        let ours = ["metrics".to_owned()];
        let others = ["https://kubernetes.default.svc".to_owned()];
        assert!(issued_for(None, None), "no audience asked: the API server's own");
        assert!(issued_for(Some("metrics"), Some(&ours)));
        assert!(!issued_for(Some("metrics"), Some(&others)));
        assert!(!issued_for(Some("metrics"), Some(&[])));
        // An authenticator that ignores audiences says nothing of them.
        assert!(!issued_for(Some("metrics"), None));
    }

    #[tokio::test]
    async fn tokens_that_cannot_be_valid_cost_no_review() {
        let reviews = Counted::default();
        let auth = Authorizer::new(reviews.clone());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let made_up = (0..1000).map(|i| format!("Bearer made-up-{i}"));
        let shapes = [
            "Bearer a.b.c".to_owned(),
            format!("Bearer {}.{}.", base64url(r#"{"alg":"RS256"}"#), base64url("{}")),
            format!("Bearer {}.{}.sig", base64url("[]"), base64url("{}")),
            format!(
                "Bearer {}.{}.sig",
                base64url(r#"{"alg":"RS256"}"#),
                base64url("not json")
            ),
            format!("Bearer {}", jwt("good", Some(now - 1))),
            format!("Bearer {}", "x".repeat(MAX_TOKEN + 1)),
        ];
        for value in made_up.chain(shapes) {
            let value = HeaderValue::from_str(&value).unwrap();
            assert_eq!(
                auth.check(HERE, Some(&value)).await,
                Err(Refusal::Unauthenticated),
                "{value:?}"
            );
        }
        assert_eq!(reviews.0.load(Ordering::SeqCst), 0, "the API server was asked");
        // A live one is reviewed.
        let live = HeaderValue::from_str(&format!("Bearer {}", jwt("good", Some(now + 600)))).unwrap();
        assert_eq!(auth.check(HERE, Some(&live)).await, Ok(()));
        assert_eq!(reviews.0.load(Ordering::SeqCst), 1);
    }
}
