//! The connection to Neutron: a session of the OpenStack SDK (`openstack_sdk`), the few requests
//! this backend sends, and what their failures mean.
//!
//! The SDK does the hard parts: clouds.yaml and `OS_*` parsing, Keystone authentication
//! (password, token, application credential), the service catalog (region and interface) and
//! version discovery. The session is made lazily, and made again before its token expires,
//! after an authentication failure or a token refused early, reading the configuration anew
//! each time, so credentials fixed in clouds.yaml (a Secret's volume is updated in place) are
//! taken without a restart.
//!
//! Every request is the SDK's own. Neutron refuses `tags` in a create ("Attribute 'tags' not
//! allowed in POST"), so an object is created with the marker description and then tagged with
//! `PUT .../tags/{tag}`, one tag at a time, so that tags others add are never overwritten (see
//! [`super::model`] for how an object left untagged is known again). Updates are conditional
//! on the revision read, where Neutron offers it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use openstack_sdk::api::network::v2::{extension, network, subnet};
use openstack_sdk::api::{ApiError, Pagination, QueryAsync, ignore, paged};
use openstack_sdk::config::{CloudConfig, ConfigFile};
use openstack_sdk::types::ServiceType;
use openstack_sdk::{AsyncOpenStack, RestError};
use serde_json::Value;

use super::model::{Desired, NeutronNetwork, NeutronSubnet, Pool};
use crate::network::backend::BackendError;
use crate::network::metrics::BackendRequests;
use crate::runtime::metrics::Metrics;
use std::sync::Arc;

/// The kinds of object this backend tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tagged {
    Network,
    Subnet,
}

/// Where the cloud's configuration comes from, as every OpenStack tool takes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CloudSource {
    /// A cloud of clouds.yaml (`--os-cloud`, `OS_CLOUD`); `None` takes the `OS_*` variables.
    pub cloud: Option<String>,
    /// A clouds.yaml to read besides the usual places (`OS_CLIENT_CONFIG_FILE`).
    pub config_file: Option<PathBuf>,
    /// Overrides the cloud's `region_name`.
    pub region: Option<String>,
    /// Overrides the cloud's endpoint interface (`public`, `internal`, `admin`).
    pub interface: Option<String>,
}

impl CloudSource {
    /// Reads the configuration now. The message names what to fix.
    pub fn load(&self) -> Result<CloudConfig, String> {
        let mut config = match &self.cloud {
            Some(name) => {
                if let Some(file) = &self.config_file
                    && !file.is_file()
                {
                    return Err(format!("the clouds.yaml {} does not exist", file.display()));
                }
                let files =
                    ConfigFile::new_with_user_specified_configs(self.config_file.as_ref(), None::<PathBuf>)
                        .map_err(|e| format!("reading clouds.yaml: {e}"))?;
                files
                    .get_cloud_config(name)
                    .map_err(|e| format!("reading cloud {name:?} of clouds.yaml: {e}"))?
                    .ok_or_else(|| {
                        format!(
                            "no cloud {name:?} in clouds.yaml (searched {}./clouds.yaml, \
                             ~/.config/openstack/ and /etc/openstack/; clouds found: {:?})",
                            self.config_file
                                .as_ref()
                                .map(|f| format!("{}, ", f.display()))
                                .unwrap_or_default(),
                            files.get_available_clouds()
                        )
                    })?
            }
            None => {
                let config =
                    CloudConfig::from_env().map_err(|e| format!("reading the OS_* variables: {e}"))?;
                if config.auth.as_ref().and_then(|a| a.auth_url.as_ref()).is_none() {
                    return Err(
                        "no OpenStack cloud configured: give --os-cloud (OS_CLOUD) with a \
                                clouds.yaml, or the OS_AUTH_URL and credential OS_* variables"
                            .into(),
                    );
                }
                config
            }
        };
        if let Some(region) = &self.region {
            config.region_name = Some(region.clone());
        }
        if let Some(interface) = &self.interface {
            config.interface = Some(interface.clone());
        }
        // Tokens stay in memory: the root filesystem of the operator's container is read-only,
        // and a token on disk is a secret on disk.
        config.auth_cache = Some(false);
        Ok(config)
    }

    /// The cloud's name for messages.
    pub fn describe(&self) -> String {
        match &self.cloud {
            Some(name) => format!("cloud {name:?}"),
            None => "the OS_* cloud".into(),
        }
    }
}

/// Refers to the auth methods we support, so that the linker keeps them: the SDK finds them
/// through `inventory` registrations, which a crate nobody refers to does not contribute (the
/// SDK's own anchors are generated from a Cargo.toml layout the published crate no longer has).
fn link_auth_methods() {
    std::hint::black_box((
        &openstack_sdk_auth_applicationcredential::ANCHOR,
        &openstack_sdk_auth_password::ANCHOR,
        &openstack_sdk_auth_token::ANCHOR,
    ));
}

/// How long an authentication failure is remembered before the next attempt: every Network
/// retries, and a Keystone may lock an account out after a few failures.
const AUTH_FAILURE_HOLD: Duration = Duration::from_secs(15);
/// Per request; a neutron-server that accepts connections but does not answer is down too.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

struct Connected {
    client: AsyncOpenStack,
    /// When a new session replaces this one, before its token expires.
    renew_at: Option<Instant>,
    /// When its token expires.
    expires_at: Option<Instant>,
}

impl Connected {
    fn is_stale(&self, now: Instant, lasting: Duration) -> bool {
        is_stale(self.renew_at, self.expires_at, now, lasting)
    }
}

/// Whether a session is to be replaced before a request that may take `lasting` (all the
/// pages of a listing): at its renewal time, or when its token would expire before the
/// request is done.
fn is_stale(renew_at: Option<Instant>, expires_at: Option<Instant>, now: Instant, lasting: Duration) -> bool {
    renew_at.is_some_and(|at| now >= at) || expires_at.is_some_and(|at| now + lasting >= at)
}

/// A lazily made, shared SDK session, counted in the metrics.
pub struct Session {
    source: CloudSource,
    state: tokio::sync::Mutex<SessionState>,
    requests: BackendRequests,
    /// Whether Neutron takes `If-Match: revision_number=N`, asked once (an upgraded Neutron
    /// is asked again when the operator restarts).
    if_match: tokio::sync::OnceCell<bool>,
    /// Names the operator and its cluster in neutron-server's access log.
    agent: http::HeaderValue,
    /// How long the last complete listing took, all its pages, in milliseconds: a listing
    /// starts on a session whose token lasts twice that, so that no page meets an expired
    /// token when Neutron is slow.
    listing_millis: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct SessionState {
    connected: Option<Connected>,
    /// Counts the sessions made, so that the requests refused on one session replace it once.
    generation: u64,
    failed: Option<(Instant, BackendError)>,
}

impl Session {
    pub fn new(source: CloudSource, metrics: Arc<Metrics>) -> Self {
        Self::for_cluster(source, metrics, None)
    }

    /// A session whose requests name `cluster_id` in their `User-Agent`, so that a cloud's
    /// operators can tell which cluster sent what.
    pub fn for_cluster(source: CloudSource, metrics: Arc<Metrics>, cluster_id: Option<&str>) -> Self {
        link_auth_methods();
        Self {
            source,
            state: Default::default(),
            requests: BackendRequests::new(&metrics),
            if_match: tokio::sync::OnceCell::new(),
            agent: user_agent(cluster_id),
            listing_millis: Default::default(),
        }
    }

    /// The session, made if there is none or if its token would not last `lasting` more;
    /// single-flight, so a hundred reconciles make one.
    async fn client(&self, lasting: Duration) -> Result<(AsyncOpenStack, u64), BackendError> {
        let mut state = self.state.lock().await;
        if let Some(connected) = &state.connected {
            if !connected.is_stale(Instant::now(), lasting) {
                return Ok((connected.client.clone(), state.generation));
            }
            // Requests in flight keep the old session, whose token is still valid.
            tracing::debug!("renewing the Keystone session before its token expires");
            state.connected = None;
        }
        if let Some((at, error)) = &state.failed
            && at.elapsed() < AUTH_FAILURE_HOLD
        {
            return Err(error.clone());
        }
        let result = self.connect().await;
        self.count("POST", "tokens", result.as_ref().err());
        match result {
            Ok(connected) => {
                let client = connected.client.clone();
                state.connected = Some(connected);
                state.generation += 1;
                state.failed = None;
                Ok((client, state.generation))
            }
            Err(error) => {
                if matches!(
                    error,
                    BackendError::AuthFailed(_) | BackendError::Misconfigured(_)
                ) {
                    state.failed = Some((Instant::now(), error.clone()));
                }
                Err(error)
            }
        }
    }

    async fn connect(&self) -> Result<Connected, BackendError> {
        let config = self.source.load().map_err(BackendError::Misconfigured)?;
        // The SDK's own retry after a 401, and its renewal task, authenticate again but take
        // the network endpoint from the new token's catalog, without the version discovery
        // added (requests went to `/networks` instead of `/v2.0/networks` until it was
        // discovered again): so neither is used, and a 401 or a token near its expiry makes a
        // whole new session instead.
        let client = AsyncOpenStack::builder(&config)
            .max_auth_retries(0)
            .disable_auth_cache(true)
            .http_timeout(REQUEST_TIMEOUT)
            .http_connect_timeout(CONNECT_TIMEOUT)
            .connect()
            .await
            .map_err(|e| {
                classify(
                    &e,
                    &format!("authenticating to Keystone as {}", self.source.describe()),
                )
            })?;
        // The catalog names the service's root; its version document gives the API's URL.
        client
            .discover_service_endpoint(&ServiceType::Network)
            .await
            .map_err(|e| classify(&e, "discovering the network API's versions"))?;
        // Renewed well before expiry; a token refused before then makes a new session in `send`.
        let (renew_at, expires_at) = client.get_auth_info().map_or((None, None), |info| {
            let now = chrono::Utc::now();
            let lifetime = info.token.expires_at - info.token.issued_at.unwrap_or(now);
            let at = |when: chrono::DateTime<chrono::Utc>| Some(Instant::now() + (when - now).to_std().ok()?);
            (
                at(info.token.expires_at - renewal_margin(Some(lifetime))),
                at(info.token.expires_at),
            )
        });
        tracing::info!(cloud = %self.source.describe(), "authenticated to Keystone");
        Ok(Connected {
            client,
            renew_at,
            expires_at,
        })
    }

    fn count(&self, method: &'static str, resource: &'static str, error: Option<&BackendError>) {
        let result = error.map_or("ok", BackendError::reason);
        self.requests.count("neutron", method, resource, result);
    }

    /// Forgets session `generation` after an authentication failure, so that the next request
    /// reads the configuration again and authenticates anew; a session made since stays.
    async fn forget(&self, error: &BackendError, generation: u64) {
        if matches!(error, BackendError::AuthFailed(_)) {
            let mut state = self.state.lock().await;
            if state.generation == generation {
                state.connected = None;
            }
        }
    }

    /// Sends one request, counting it and translating its failure. A request refused with 401
    /// (a token revoked before its expiry) is sent once more on a new session.
    async fn send<T, E>(
        &self,
        method: &'static str,
        resource: &'static str,
        action: &str,
        endpoint: E,
    ) -> Result<T, BackendError>
    where
        E: QueryAsync<T, AsyncOpenStack> + Sync,
        T: 'static,
    {
        self.send_lasting(method, resource, action, endpoint, Duration::ZERO)
            .await
    }

    /// Sends a listing, all its pages, on a session whose token lasts twice as long as the
    /// last listing took, and remembers how long this one took.
    async fn send_listing<T, E>(
        &self,
        resource: &'static str,
        action: &str,
        endpoint: E,
    ) -> Result<T, BackendError>
    where
        E: QueryAsync<T, AsyncOpenStack> + Sync,
        T: 'static,
    {
        use std::sync::atomic::Ordering;
        let last = Duration::from_millis(self.listing_millis.load(Ordering::Relaxed));
        let started = Instant::now();
        let result = self
            .send_lasting("GET", resource, action, endpoint, last * 2)
            .await;
        if result.is_ok() {
            let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.listing_millis.store(took, Ordering::Relaxed);
        }
        result
    }

    async fn send_lasting<T, E>(
        &self,
        method: &'static str,
        resource: &'static str,
        action: &str,
        endpoint: E,
        lasting: Duration,
    ) -> Result<T, BackendError>
    where
        E: QueryAsync<T, AsyncOpenStack> + Sync,
        T: 'static,
    {
        let mut retried = false;
        loop {
            let (client, generation) = self.client(lasting).await?;
            let result = endpoint
                .query_async(&client)
                .await
                .map_err(|e| classify_api(&e, action));
            self.count(method, resource, result.as_ref().err());
            match &result {
                Err(error) => self.forget(error, generation).await,
                Ok(_) => return result,
            }
            if retried || !matches!(result, Err(BackendError::AuthFailed(_))) {
                return result;
            }
            retried = true;
        }
    }

    /// The `If-Match` header that makes a write of an object read at `revision` conditional,
    /// where Neutron offers the `revision-if-match` extension: a 412 then says somebody
    /// changed the object since, instead of our write overwriting their change unseen.
    async fn if_match(&self, revision: Option<i64>) -> Result<Option<http::HeaderValue>, BackendError> {
        let Some(revision) = revision else {
            return Ok(None);
        };
        let offered = self
            .if_match
            .get_or_try_init(|| async {
                let request = extension::get::Request::builder()
                    .header(http::header::USER_AGENT, self.agent.clone())
                    .id("revision-if-match")
                    .build()
                    .map_err(|e| BackendError::Failed(e.to_string()))?;
                let answer = self
                    .send::<Value, _>("GET", "extensions", "asking for Neutron's extensions", request)
                    .await;
                match answer {
                    Ok(_) => Ok(true),
                    Err(BackendError::NotFound(_)) => Ok(false),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(offered.then(|| {
            http::HeaderValue::from_str(&format!("revision_number={revision}"))
                .expect("a number is a header value")
        }))
    }

    /// Every network tagged with all of `tags` (and named `name`, when given).
    pub async fn list_networks(
        &self,
        tags: &[String],
        name: Option<&str>,
    ) -> Result<Vec<NeutronNetwork>, BackendError> {
        let mut request = network::list::Request::builder();
        request.header(http::header::USER_AGENT, self.agent.clone());
        if !tags.is_empty() {
            request.tags(tags.iter().map(String::as_str));
        }
        if let Some(name) = name {
            request.name(name);
        }
        let request = request.build().map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send_listing("networks", "listing networks", paged(request, Pagination::All))
            .await
    }

    /// Every network whose description is `marker`: ours, also where its tags never came.
    pub async fn list_marked_networks(&self, marker: &str) -> Result<Vec<NeutronNetwork>, BackendError> {
        let request = network::list::Request::builder()
            .header(http::header::USER_AGENT, self.agent.clone())
            .description(marker)
            .build()
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send_listing("networks", "listing networks", paged(request, Pagination::All))
            .await
    }

    /// Every subnet tagged with all of `tags`.
    pub async fn list_subnets(&self, tags: &[String]) -> Result<Vec<NeutronSubnet>, BackendError> {
        let mut request = subnet::list::Request::builder();
        request.header(http::header::USER_AGENT, self.agent.clone());
        request.tags(tags.iter().map(String::as_str));
        let request = request.build().map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send_listing("subnets", "listing subnets", paged(request, Pagination::All))
            .await
    }

    /// Every subnet on the network `network_id`, tagged or not.
    pub async fn list_subnets_on(&self, network_id: &str) -> Result<Vec<NeutronSubnet>, BackendError> {
        let request = subnet::list::Request::builder()
            .header(http::header::USER_AGENT, self.agent.clone())
            .network_id(network_id)
            .build()
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send_listing("subnets", "listing subnets", paged(request, Pagination::All))
            .await
    }

    /// Creates the network, with the marker description; [`Self::add_tag`] tags it.
    pub async fn create_network(&self, desired: &Desired) -> Result<NeutronNetwork, BackendError> {
        let request = network::create::Request::builder()
            .header(http::header::USER_AGENT, self.agent.clone())
            .network(
                network::create::NetworkBuilder::default()
                    .name(desired.name.as_str())
                    .description(desired.description.as_str())
                    .admin_state_up(true)
                    .build()
                    .map_err(|e| BackendError::Failed(e.to_string()))?,
            )
            .build()
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send("POST", "networks", "creating the network", request)
            .await
    }

    /// Creates the subnet on `network_id`, with the marker description; [`Self::add_tag`] tags
    /// it.
    pub async fn create_subnet(
        &self,
        network_id: &str,
        desired: &Desired,
        dhcp: bool,
    ) -> Result<NeutronSubnet, BackendError> {
        let request = subnet::create::Request::builder()
            .header(http::header::USER_AGENT, self.agent.clone())
            .subnet(
                subnet::create::SubnetBuilder::default()
                    .network_id(network_id)
                    .name(desired.name.as_str())
                    .description(desired.description.as_str())
                    .ip_version(i32::from(desired.ip_version()))
                    .cidr(Some(desired.prefix.to_string().into()))
                    .gateway_ip(Some(desired.gateway.to_string().into()))
                    .enable_dhcp(dhcp)
                    .build()
                    .map_err(|e| BackendError::Failed(e.to_string()))?,
            )
            .build()
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send("POST", "subnets", "creating the subnet", request).await
    }

    /// Adds one tag to a network or subnet (`PUT .../tags/{tag}`): tags others put there
    /// stay, whatever they became since we read them.
    pub async fn add_tag(&self, object: Tagged, id: &str, tag: &str) -> Result<(), BackendError> {
        match object {
            Tagged::Network => {
                let request = network::tag::set::Request::builder()
                    .header(http::header::USER_AGENT, self.agent.clone())
                    .network_id(id)
                    .id(tag)
                    .build()
                    .map_err(|e| BackendError::Failed(e.to_string()))?;
                self.send("PUT", "networks", "tagging the network", ignore(request))
                    .await
            }
            Tagged::Subnet => {
                let request = subnet::tag::set::Request::builder()
                    .header(http::header::USER_AGENT, self.agent.clone())
                    .subnet_id(id)
                    .id(tag)
                    .build()
                    .map_err(|e| BackendError::Failed(e.to_string()))?;
                self.send("PUT", "subnets", "tagging the subnet", ignore(request))
                    .await
            }
        }
    }

    /// Removes one tag from a network or subnet; gone is fine.
    pub async fn remove_tag(&self, object: Tagged, id: &str, tag: &str) -> Result<(), BackendError> {
        let sent = match object {
            Tagged::Network => {
                let request = network::tag::delete::Request::builder()
                    .header(http::header::USER_AGENT, self.agent.clone())
                    .network_id(id)
                    .id(tag)
                    .build()
                    .map_err(|e| BackendError::Failed(e.to_string()))?;
                self.send("DELETE", "networks", "untagging the network", ignore(request))
                    .await
            }
            Tagged::Subnet => {
                let request = subnet::tag::delete::Request::builder()
                    .header(http::header::USER_AGENT, self.agent.clone())
                    .subnet_id(id)
                    .id(tag)
                    .build()
                    .map_err(|e| BackendError::Failed(e.to_string()))?;
                self.send("DELETE", "subnets", "untagging the subnet", ignore(request))
                    .await
            }
        };
        gone_is_fine(sent).map(drop)
    }

    /// Renames a network read at `revision` (conditionally, see [`Self::if_match`]).
    pub async fn rename_network(
        &self,
        id: &str,
        name: &str,
        revision: Option<i64>,
    ) -> Result<(), BackendError> {
        let mut request = network::set::Request::builder();
        request.header(http::header::USER_AGENT, self.agent.clone());
        request.id(id).network(
            network::set::NetworkBuilder::default()
                .name(name)
                .build()
                .map_err(|e| BackendError::Failed(e.to_string()))?,
        );
        if let Some(value) = self.if_match(revision).await? {
            request.header(http::header::IF_MATCH, value);
        }
        let request = request.build().map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send::<Value, _>("PUT", "networks", "renaming the network", request)
            .await
            .map(drop)
    }

    /// Sets a subnet read at `revision` to the desired name and gateway, and `pools` when
    /// given (conditionally, see [`Self::if_match`]).
    pub async fn update_subnet(
        &self,
        id: &str,
        desired: &Desired,
        pools: Option<&[Pool]>,
        revision: Option<i64>,
    ) -> Result<(), BackendError> {
        let mut fields = subnet::set::SubnetBuilder::default();
        fields
            .name(desired.name.as_str())
            .gateway_ip(Some(desired.gateway.to_string().into()));
        if let Some(pools) = pools {
            let pools: Result<Vec<_>, _> = pools
                .iter()
                .map(|p| {
                    subnet::set::AllocationPoolsBuilder::default()
                        .start(p.start.as_str())
                        .end(p.end.as_str())
                        .build()
                })
                .collect();
            fields.allocation_pools(pools.map_err(|e| BackendError::Failed(e.to_string()))?);
        }
        let mut request = subnet::set::Request::builder();
        request.header(http::header::USER_AGENT, self.agent.clone());
        request
            .id(id)
            .subnet(fields.build().map_err(|e| BackendError::Failed(e.to_string()))?);
        if let Some(value) = self.if_match(revision).await? {
            request.header(http::header::IF_MATCH, value);
        }
        let request = request.build().map_err(|e| BackendError::Failed(e.to_string()))?;
        self.send::<Value, _>("PUT", "subnets", "updating the subnet", request)
            .await
            .map(drop)
    }

    /// Deletes a network (Neutron deletes its subnets with it); `false` when it was gone.
    pub async fn delete_network(&self, id: &str) -> Result<bool, BackendError> {
        let request = network::delete::Request::builder()
            .header(http::header::USER_AGENT, self.agent.clone())
            .id(id)
            .build()
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        gone_is_fine(
            self.send("DELETE", "networks", "deleting the network", ignore(request))
                .await,
        )
    }

    /// Deletes a subnet; `false` when it was gone.
    pub async fn delete_subnet(&self, id: &str) -> Result<bool, BackendError> {
        let request = subnet::delete::Request::builder()
            .header(http::header::USER_AGENT, self.agent.clone())
            .id(id)
            .build()
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        gone_is_fine(
            self.send("DELETE", "subnets", "deleting the subnet", ignore(request))
                .await,
        )
    }
}

/// `sample-operator/<version>`, and ` cluster/<id>` when given. A cluster id is validated to
/// carry no spaces or control characters; should one not fit a header, the version alone is
/// sent.
fn user_agent(cluster_id: Option<&str>) -> http::HeaderValue {
    let product = format!("sample-operator/{}", env!("CARGO_PKG_VERSION"));
    cluster_id
        .and_then(|id| http::HeaderValue::from_str(&format!("{product} cluster/{id}")).ok())
        .unwrap_or_else(|| http::HeaderValue::from_str(&product).expect("a version is a header value"))
}

/// How long before its expiry a token is renewed: a minute, or a quarter of a shorter
/// lifetime (a cloud may issue tokens of a few minutes; a margin as long as the lifetime
/// would renew without pause).
fn renewal_margin(lifetime: Option<chrono::TimeDelta>) -> chrono::TimeDelta {
    let minute = chrono::TimeDelta::seconds(60);
    lifetime.map_or(minute, |lifetime| minute.min(lifetime / 4))
}

fn gone_is_fine(result: Result<(), BackendError>) -> Result<bool, BackendError> {
    match result {
        Ok(()) => Ok(true),
        Err(BackendError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What a failed Neutron request means for the Network.
fn classify_api(error: &ApiError<RestError>, action: &str) -> BackendError {
    let (status, detail) = match error {
        ApiError::OpenStack { status, msg, .. } => (*status, neutron_message(msg)),
        ApiError::OpenStackUnrecognized { status, obj, .. } => (*status, neutron_error(obj)),
        ApiError::OpenStackService { status, data, .. } => (*status, data.clone()),
        other => return classify(other, action),
    };
    by_status(
        status.as_u16(),
        &format!("{action}: Neutron answered {status}: {detail}"),
        &detail,
    )
}

/// Translates an HTTP status of Neutron into the failure it reports.
fn by_status(status: u16, message: &str, detail: &str) -> BackendError {
    let message = message.to_owned();
    match status {
        401 => BackendError::AuthFailed(format!(
            "{message}; the credentials are no longer accepted: check them in clouds.yaml or the OS_* variables"
        )),
        // A policy refusal: the same session would be refused the same way by a new one.
        403 => BackendError::Forbidden(format!(
            "{message}; the OpenStack user is not allowed to do this: give it the member role in its project, or have the cloud's policy allow it"
        )),
        404 => BackendError::NotFound(message),
        409 if detail.contains("OverQuota") || detail.to_ascii_lowercase().contains("quota") => {
            BackendError::QuotaExceeded(format!(
                "{message}; raise the project's quota (openstack quota set) or delete unused networks"
            ))
        }
        // A conditional write refused: the object changed since it was read.
        412 => BackendError::Changed(format!(
            "{message}; somebody changed the object since the operator read it: reading it again"
        )),
        409 => BackendError::Conflict(format!(
            "{message}; somebody changed the object at the same time, or it is in use: retrying"
        )),
        502..=504 => {
            BackendError::Unreachable(format!("{message}; Neutron is not serving requests: retrying"))
        }
        _ => BackendError::Failed(message),
    }
}

/// `{"NeutronError": {"type", "message", "detail"}}` as `type: message`.
fn neutron_error(body: &Value) -> String {
    match body.get("NeutronError") {
        Some(e) => format!(
            "{}: {}",
            e.get("type").and_then(Value::as_str).unwrap_or("NeutronError"),
            e.get("message").and_then(Value::as_str).unwrap_or_default()
        ),
        None => body.to_string(),
    }
}

/// The SDK puts a 404's whole body in `msg`.
fn neutron_message(msg: &str) -> String {
    serde_json::from_str::<Value>(msg)
        .map(|v| neutron_error(&v))
        .unwrap_or_else(|_| msg.to_owned())
}

/// What a failure outside Neutron's answers means: the network failed (unreachable), or
/// Keystone refused us, or the configuration is wrong.
fn classify(error: &(dyn std::error::Error + 'static), action: &str) -> BackendError {
    let mut source = Some(error);
    let mut unreachable = false;
    let mut auth = None;
    while let Some(e) = source {
        if let Some(e) = e.downcast_ref::<reqwest::Error>()
            && (e.is_connect() || e.is_timeout() || e.is_request())
        {
            unreachable = true;
        }
        if let Some(e) = e.downcast_ref::<openstack_sdk::AuthError>() {
            auth.get_or_insert_with(|| e.to_string());
        }
        source = e.source();
    }
    let detail = crate::runtime::error_chain(error);
    if unreachable {
        BackendError::Unreachable(format!(
            "{action}: {detail}; check that Keystone and neutron-server run and that the operator can reach them"
        ))
    } else if auth.is_some() {
        BackendError::AuthFailed(format!(
            "{action}: {detail}; fix the credentials in clouds.yaml or the OS_* variables (they are read again at the next retry)"
        ))
    } else if detail.contains("catalog") || detail.contains("endpoint") {
        BackendError::Misconfigured(format!(
            "{action}: {detail}; the Keystone catalog has no network endpoint for the configured region and interface"
        ))
    } else {
        BackendError::Failed(format!("{action}: {detail}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_become_distinct_reasons() {
        let quota = r#"{"NeutronError": {"type": "OverQuota", "message": "Quota exceeded for resources: ['network'].", "detail": ""}}"#;
        let detail = neutron_error(&serde_json::from_str(quota).unwrap());
        assert_eq!(detail, "OverQuota: Quota exceeded for resources: ['network'].");
        assert_eq!(by_status(409, "m", &detail).reason(), "BackendQuotaExceeded");
        assert_eq!(
            by_status(409, "m", "NetworkInUse: in use").reason(),
            "BackendConflict"
        );
        assert_eq!(
            by_status(412, "m", "RevisionNumberConstraintFailed").reason(),
            "BackendConflict"
        );
        assert_eq!(by_status(401, "m", "").reason(), "BackendAuthFailed");
        assert_eq!(by_status(403, "m", "").reason(), "BackendForbidden");
        assert_eq!(by_status(500, "m", "").reason(), "BackendError");
        assert_eq!(by_status(503, "m", "").reason(), "BackendUnavailable");
        assert!(
            !by_status(503, "m", "").forgets_reference(),
            "the network is still there"
        );
        assert!(matches!(by_status(404, "m", ""), BackendError::NotFound(_)));
    }

    #[test]
    fn short_lived_tokens_are_renewed_at_three_quarters_of_their_life() {
        let seconds = chrono::TimeDelta::seconds;
        assert_eq!(renewal_margin(None), seconds(60));
        assert_eq!(renewal_margin(Some(seconds(3600))), seconds(60));
        assert_eq!(renewal_margin(Some(seconds(120))), seconds(30));
    }

    #[test]
    fn a_long_listing_starts_on_a_token_that_outlasts_it() {
        let now = Instant::now();
        let s = Duration::from_secs;
        // Renewed at its time, whatever the request.
        assert!(is_stale(Some(now), Some(now + s(30)), now, Duration::ZERO));
        // A single request goes on a token with 60 s left; a listing that took 40 s last time
        // (80 s asked) does not.
        let (renew, expire) = (Some(now + s(30)), Some(now + s(60)));
        assert!(!is_stale(renew, expire, now, Duration::ZERO));
        assert!(!is_stale(renew, expire, now, s(50)));
        assert!(is_stale(renew, expire, now, s(80)));
        // A token with no known expiry is kept.
        assert!(!is_stale(None, None, now, s(3600)));
    }

    #[test]
    fn a_404_body_is_read_like_any_other() {
        let msg = r#"{"NeutronError": {"type": "NetworkNotFound", "message": "Network x could not be found.", "detail": ""}}"#;
        assert_eq!(
            neutron_message(msg),
            "NetworkNotFound: Network x could not be found."
        );
        assert_eq!(neutron_message("plain"), "plain");
    }

    #[test]
    fn a_missing_cloud_names_the_places_searched() {
        let dir = std::env::temp_dir().join(format!("clouds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("clouds.yaml");
        std::fs::write(
            &file,
            "clouds:\n  mine:\n    auth:\n      auth_url: http://127.0.0.1:1/v3\n      application_credential_id: a\n      application_credential_secret: b\n    auth_type: v3applicationcredential\n    region_name: RegionOne\n",
        )
        .unwrap();
        let source = CloudSource {
            cloud: Some("mine".into()),
            config_file: Some(file.clone()),
            region: Some("RegionTwo".into()),
            interface: Some("internal".into()),
        };
        let config = source.load().unwrap();
        assert_eq!(config.region_name.as_deref(), Some("RegionTwo"));
        assert_eq!(config.interface.as_deref(), Some("internal"));
        assert_eq!(config.auth_cache, Some(false));
        let missing = CloudSource {
            cloud: Some("other".into()),
            ..source.clone()
        };
        let error = missing.load().unwrap_err();
        assert!(error.contains("no cloud \"other\""), "{error}");
        assert!(error.contains("mine"), "{error}");
        let no_file = CloudSource {
            config_file: Some(dir.join("absent.yaml")),
            ..source
        };
        assert!(no_file.load().unwrap_err().contains("does not exist"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
