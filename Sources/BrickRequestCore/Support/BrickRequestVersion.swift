/// The version of the BrickRequest library.
public enum BrickRequestVersion {
    /// The version string, e.g. `0.1.0`, sent in the default `User-Agent`.
    public static let string = "0.1.0"
}
