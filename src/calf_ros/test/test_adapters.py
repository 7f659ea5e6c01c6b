"""Adapters, by config only: standard messages <-> observation vectors, actions <-> Twist / Float32MultiArray.

The adapter nodes themselves are tested over DDS in tests/test_adapter_policy_node.py and
tests/test_adapter_env_node.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray

from calf_core.errors import ConfigError, MessageError
from calf_ros.adapters import (
    ACTION_QOS,
    OBSERVATION_QOS,
    AdapterConfig,
    load_adapter_config,
    parse_adapter_config,
    parse_observation,
    set_fields,
)
from calf_ros.qos import QosConfig

JOINTS = {'topic': '/joint_states', 'type': 'sensor_msgs/msg/JointState', 'joints': ['cart', 'pole'],
          'fields': ['position', 'velocity']}
TWIST_TABLE = {'topic': '/cmd_vel', 'type': 'geometry_msgs/msg/Twist', 'fields': ['linear.x', 'angular.z'],
               'table': [[-0.5, 0.0], [0.5, 0.1]]}


def config(observation: dict | None = None, action: dict | None = None) -> AdapterConfig:
    return parse_adapter_config({'observation': observation or JOINTS, 'action': action or TWIST_TABLE})


def joint_state(**fields: list[float]) -> JointState:
    return JointState(name=['pole', 'wheel', 'cart'], **fields)


def test_joint_state_reads_each_joint_field_in_config_order() -> None:
    msg = joint_state(position=[0.1, 9.0, 0.3], velocity=[-1.0, 9.0, 2.0], effort=[7.0, 8.0, 9.0])
    obs = config().observation.decode(msg, 4)
    assert obs.dtype == np.float32
    np.testing.assert_array_equal(obs, np.float32([0.3, 2.0, 0.1, -1.0]))  # cart.pos, cart.vel, pole.pos, pole.vel


@pytest.mark.parametrize('msg, message', [
    (JointState(name=['cart'], position=[0.0], velocity=[0.0]), "JointState has no joint 'pole' (it has ['cart'])"),
    (joint_state(position=[0.0, 0.0, 0.0]), 'JointState velocity has 0 values for 3 joints'),
    (joint_state(position=[np.nan, 0.0, 0.0], velocity=[0.0] * 3), 'holds NaN or infinite values'),
])
def test_bad_joint_states_are_one_line_message_errors(msg: JointState, message: str) -> None:
    with pytest.raises(MessageError, match=message.replace('[', r'\[').replace(']', r'\]').replace('(', r'\(')
                       .replace(')', r'\)')):
        config().observation.decode(msg, 4)


def test_odometry_reads_the_chosen_fields() -> None:
    adapter = parse_observation({'topic': '/odom', 'type': 'nav_msgs/Odometry',
                                 'fields': ['pose.pose.position.x', 'twist.twist.angular.z']})
    msg = Odometry()
    msg.pose.pose.position.x, msg.twist.twist.angular.z = 1.5, -0.25
    np.testing.assert_array_equal(adapter.decode(msg, 2), np.float32([1.5, -0.25]))
    assert adapter.reader.size == 2 and adapter.qos == OBSERVATION_QOS


@pytest.mark.parametrize('indices, expected', [(None, [1.0, 2.0, 3.0]), ([2, 0], [3.0, 1.0])])
def test_float32_multi_array_reads_data_or_chosen_indices(indices: list[int] | None, expected: list[float]) -> None:
    spec = {'topic': '/obs', 'type': 'std_msgs/msg/Float32MultiArray'}
    adapter = parse_observation(spec if indices is None else {**spec, 'indices': indices})
    np.testing.assert_array_equal(adapter.decode(Float32MultiArray(data=[1.0, 2.0, 3.0]), len(expected)),
                                  np.float32(expected))


def test_a_wrong_observation_size_is_a_message_error() -> None:
    adapter = parse_observation({'topic': '/obs', 'type': 'std_msgs/msg/Float32MultiArray'})
    with pytest.raises(MessageError, match='std_msgs/msg/Float32MultiArray on /obs gave 3 values, the policy '
                                           'expects 4'):
        adapter.decode(Float32MultiArray(data=[1.0, 2.0, 3.0]), 4)
    indexed = parse_observation({'topic': '/obs', 'type': 'std_msgs/msg/Float32MultiArray', 'indices': [5]})
    with pytest.raises(MessageError, match='Float32MultiArray has 3 values, index 5 was asked for'):
        indexed.decode(Float32MultiArray(data=[1.0, 2.0, 3.0]), 1)


def test_discrete_actions_become_twists_from_the_table() -> None:
    action = config().action
    assert action.encode(1) == {'linear.x': 0.5, 'angular.z': 0.1}
    msg = set_fields(Twist(), action.encode(np.int64(0)))
    assert (msg.linear.x, msg.linear.y, msg.angular.z) == (-0.5, 0.0, 0.0)
    assert action.qos == ACTION_QOS
    with pytest.raises(ValueError, match='action 2 is outside the table of 2 rows'):
        action.encode(2)


def test_continuous_actions_fill_the_twist_fields() -> None:
    action = config(action={'topic': '/cmd_vel', 'type': 'geometry_msgs/Twist', 'fields': ['angular.z']}).action
    assert set_fields(Twist(), action.encode([0.75])).angular.z == 0.75
    with pytest.raises(ValueError, match='a discrete action needs a table'):
        action.encode(0)
    with pytest.raises(ValueError, match=r"has 2 values for fields \['angular.z'\]"):
        action.encode([0.1, 0.2])


def test_actions_to_float32_multi_array_fill_data() -> None:
    action = config(action={'topic': '/act', 'type': 'std_msgs/msg/Float32MultiArray',
                            'table': [[0.0, 1.0], [1.0, 0.0]], 'qos': {'depth': 1}}).action
    assert set_fields(Float32MultiArray(), action.encode(0)).data.tolist() == [0.0, 1.0]
    assert action.encode([0.25, 0.5, 1.0]) == {'data': [0.25, 0.5, 1.0]}
    assert action.qos == QosConfig('reliable', 'volatile', 1)


@pytest.mark.parametrize('observation, action, message', [
    ({**JOINTS, 'type': 'sensor_msgs/msg/Imu'}, None, 'observation type must be one of'),
    ({**JOINTS, 'fields': ['position', 'torque']}, None, "fields: unknown 'torque' (choose from position, velocity"),
    ({**JOINTS, 'indices': [0]}, None, "observation keys ['indices'] do not apply to sensor_msgs/msg/JointState"),
    ({**JOINTS, 'joints': ['cart', 'cart']}, None, 'joints lists a name twice'),
    ({'topic': '/odom', 'type': 'nav_msgs/msg/Odometry', 'fields': ['pose.x']}, None, "fields: unknown 'pose.x'"),
    (None, {**TWIST_TABLE, 'fields': ['linear.w']}, "fields: unknown 'linear.w'"),
    (None, {**TWIST_TABLE, 'table': [[0.1]]}, 'table row 0 must hold 2 finite numbers, got [0.1]'),
    (None, {**TWIST_TABLE, 'type': 'geometry_msgs/msg/TwistStamped'}, 'action type must be one of'),
    (None, {'topic': '/a', 'type': 'std_msgs/msg/Float32MultiArray', 'fields': ['x']}, 'action fields do not apply'),
    (None, {**TWIST_TABLE, 'rate': 5}, "action: unknown keys ['rate'], missing keys []"),
])
def test_bad_configs_are_one_line_config_errors(observation: dict | None, action: dict | None, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config(observation, action)
    assert message in str(err.value) and '\n' not in str(err.value)


def test_check_sizes_compares_sizes_with_the_checkpoint_or_env() -> None:
    adapter = config()
    adapter.check_sizes(4, 2)
    with pytest.raises(ConfigError, match='the adapter maps 4 observation values, the policy has 5'):
        adapter.check_sizes(5, 2)
    with pytest.raises(ConfigError, match='the env has 3 discrete actions: the adapter action table needs 3 rows, '
                                          'it has 2'):
        adapter.check_sizes(4, 3, 'env')


def test_check_sizes_wants_one_twist_field_per_continuous_action_value_and_no_table() -> None:
    twist = config(action={'topic': '/cmd_vel', 'type': 'geometry_msgs/Twist', 'fields': ['linear.x', 'angular.z']})
    twist.check_sizes(4, 0, action_dim=2)
    with pytest.raises(ConfigError, match='continuous actions of 1 values: the adapter action needs no table and 1 '
                                          'fields, it has 2 fields'):
        twist.check_sizes(4, 0, action_dim=1)
    with pytest.raises(ConfigError, match='it has a table'):
        config().check_sizes(4, 0, action_dim=2)
    array = config(action={'topic': '/act', 'type': 'std_msgs/msg/Float32MultiArray'})
    array.check_sizes(4, 0, action_dim=3)


@pytest.mark.parametrize('observation, msg_type', [
    (JOINTS, JointState),
    ({'topic': '/odom', 'type': 'nav_msgs/Odometry', 'fields': ['twist.twist.angular.z', 'pose.pose.position.x',
                                                                   'pose.pose.orientation.w', 'twist.twist.linear.y']},
     Odometry),
    ({'topic': '/obs', 'type': 'std_msgs/msg/Float32MultiArray'}, Float32MultiArray),
    ({'topic': '/obs', 'type': 'std_msgs/msg/Float32MultiArray', 'indices': [4, 1, 0, 2]}, Float32MultiArray),
])
def test_env_side_encode_is_the_inverse_of_decode(observation: dict, msg_type: type) -> None:
    adapter = parse_observation(observation)
    obs = np.float32([0.25, -1.5, 0.125, 3.0])
    msg = set_fields(msg_type(), adapter.encode(obs))
    np.testing.assert_array_equal(adapter.decode(msg, 4), obs)


def test_env_side_joint_state_names_the_joints() -> None:
    assert config().observation.encode([1.0, 2.0, 3.0, 4.0]) == {
        'name': ['cart', 'pole'], 'position': [1.0, 3.0], 'velocity': [2.0, 4.0]}
    with pytest.raises(ValueError, match='has 3 values, the adapter maps 4'):
        config().observation.encode([1.0, 2.0, 3.0])


def twist_cmd(x: float, z: float = 0.0) -> Twist:
    msg = Twist()
    msg.linear.x, msg.angular.z = x, z
    return msg


@pytest.mark.parametrize('x, z, expected', [(-0.5, 0.0, 0), (0.5, 0.1, 1), (0.3, 0.0, 1), (-0.1, 0.1, 0),
                                            (0.0, 0.0, 0)])  # a tie goes to the first row
def test_env_side_twist_becomes_the_nearest_table_row(x: float, z: float, expected: int) -> None:
    assert config().action.decode(twist_cmd(x, z)) == expected


def test_env_side_float32_multi_array_becomes_the_nearest_table_row() -> None:
    action = config(action={'topic': '/act', 'type': 'std_msgs/msg/Float32MultiArray',
                            'table': [[0.0], [1.0], [2.0]]}).action
    assert [action.decode(Float32MultiArray(data=[v])) for v in (0.0, 0.4, 0.6, 2.0)] == [0, 0, 1, 2]
    with pytest.raises(MessageError, match='holds 2 values, the action table rows have 1'):
        action.decode(Float32MultiArray(data=[0.0, 1.0]))
    with pytest.raises(MessageError, match=r'data\[0\] = 2.5 is outside the action table range \[0, 2\]'):
        action.decode(Float32MultiArray(data=[2.5]))


@pytest.mark.parametrize('msg, message', [
    (twist_cmd(float('nan')), 'geometry_msgs/msg/Twist on /cmd_vel holds NaN or infinite values'),
    (twist_cmd(0.75), r'linear.x = 0.75 is outside the action table range \[-0.5, 0.5\]'),
    (twist_cmd(0.0, -0.2), r'angular.z = -0.2 is outside the action table range \[0, 0.1\]'),
])
def test_env_side_bad_commands_are_one_line_message_errors(msg: Twist, message: str) -> None:
    with pytest.raises(MessageError, match=message):
        config().action.decode(msg)


TWIST_CONTINUOUS = {'topic': '/cmd_vel', 'type': 'geometry_msgs/msg/Twist', 'fields': ['angular.z', 'linear.x']}


def test_env_side_continuous_command_is_read_back_from_the_fields_in_order() -> None:
    action = config(action=TWIST_CONTINUOUS).action
    sent = np.float32([0.25, -1.5])
    back = action.decode(set_fields(Twist(), action.encode(sent)), (2,))
    assert back.dtype == np.float32 and back.shape == (2,)
    np.testing.assert_array_equal(back, sent)
    array = config(action={'topic': '/act', 'type': 'std_msgs/msg/Float32MultiArray'}).action
    np.testing.assert_array_equal(array.decode(Float32MultiArray(data=[1.0, 2.0, 3.0, 4.0]), (2, 2)),
                                  np.float32([[1.0, 2.0], [3.0, 4.0]]))


@pytest.mark.parametrize('msg, shape, message', [
    (twist_cmd(float('inf')), (2,), 'geometry_msgs/msg/Twist on /cmd_vel holds NaN or infinite values'),
    (twist_cmd(0.1), (3,), "holds 2 values, the env's actions have 3"),
])
def test_env_side_bad_continuous_commands_are_one_line_message_errors(msg: Twist, shape: tuple[int, ...],
                                                                      message: str) -> None:
    with pytest.raises(MessageError, match=message):
        config(action=TWIST_CONTINUOUS).action.decode(msg, shape)


def write_adapter(tmp_path: Path, observation: dict, action: dict) -> Path:
    path = tmp_path / 'adapter.yaml'
    path.write_text(f'observation: {observation}\naction: {action}\n')
    return path


def test_load_names_the_file_in_errors(tmp_path: Path) -> None:
    good = write_adapter(tmp_path, JOINTS, TWIST_TABLE)
    assert load_adapter_config(good) == config()
    bad = write_adapter(tmp_path, {**JOINTS, 'type': 'nope'}, TWIST_TABLE)
    with pytest.raises(ConfigError, match=f'^{bad}: type must look like pkg/msg/Name'):
        load_adapter_config(bad)
