//! What the operator's Events promise readers beyond the Event schema: how a summary of
//! outcomes written under load is found and counted (`docs/operating.md`, Events).

/// The reason of a summary Event, about the Namespace, which counts Normal outcomes not
/// written one by one while the operator was behind: `kubectl get events --field-selector
/// reason=EventsSummarised` finds them.
pub const SUMMARY_REASON: &str = "EventsSummarised";

/// The annotation of a summary Event: how many Normal events it stands for.
pub const SUMMARISED_ANNOTATION: &str = "sample-operator.k8s.io/summarised-events";
