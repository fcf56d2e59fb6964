/// Supplies ``RequestType/autoRetryConfiguration``; the presets below set the retry count.
public protocol AutoRetryType: RequestType {}

extension AutoRetryType {
    /// The default configuration (5 retries).
    public var autoRetryConfiguration: AutoRetryConfiguration { .default }
}

/// Three retries (``AutoRetryConfiguration/soft``).
public protocol SoftAutoRetryType: AutoRetryType {}

extension SoftAutoRetryType {
    /// Three retries.
    public var autoRetryConfiguration: AutoRetryConfiguration { .soft }
}

/// Ten retries (``AutoRetryConfiguration/hard``).
public protocol HardAutoRetryType: AutoRetryType {}

extension HardAutoRetryType {
    /// Ten retries.
    public var autoRetryConfiguration: AutoRetryConfiguration { .hard }
}

/// No retries (``AutoRetryConfiguration/none``).
public protocol NonAutoRetryType: AutoRetryType {}

extension NonAutoRetryType {
    /// No retries.
    public var autoRetryConfiguration: AutoRetryConfiguration { .none }
}
