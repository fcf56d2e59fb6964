@_exported import BrickHAR
@_exported import BrickRequest
